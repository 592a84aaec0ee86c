"""ContinuationLM scores exactly what lm-eval's HFLM scores, on a tiny random model."""

from __future__ import annotations

import pytest
import torch

from kvspec.eval.scoring import ContinuationLM
from kvspec.models.build import build_model
from kvspec.models.tokenizer import train_tokenizer

ARCH = {"family": "llama", "hidden": 32, "intermediate": 64, "layers": 2, "heads": 4,
        "kv_heads": 2, "max_position": 256}  # fmt: skip
TEXT = "the cat sat on the mat . the dog ran to the park and the bird sang in a tree"


@pytest.fixture(scope="module")
def lms():
    from lm_eval.models.huggingface import HFLM

    tok = train_tokenizer([TEXT] * 20, 300, 128)
    model = build_model(ARCH, tok, seed=0).eval()
    kw = {"pretrained": model, "tokenizer": tok, "backend": "causal", "device": "cpu",
          "batch_size": 3, "max_length": 12}  # fmt: skip
    return ContinuationLM(**kw), HFLM(**kw)


def _requests() -> list:
    g = torch.Generator().manual_seed(0)
    out = []
    for n_ctx, n_cont in [(3, 1), (5, 4), (1, 2), (9, 3), (2, 7), (14, 2), (4, 1)]:
        ids = torch.randint(3, 100, (n_ctx + n_cont,), generator=g).tolist()
        out.append((("ctx", "cont"), ids[:n_ctx], ids[n_ctx:]))
    # a repeated context with a one-token continuation (lm-eval's logits-cache path)
    out.append((("ctx", "cont"), out[0][1], [7]))
    return out


def test_scores_and_greedy_flags_match_hflm(lms) -> None:
    ours, ref = lms
    requests = _requests()  # (14, 2) exceeds max_length and is left-truncated by both
    got, want = ours._loglikelihood_tokens(requests), ref._loglikelihood_tokens(requests)
    assert [g[1] for g in got] == [w[1] for w in want]
    assert [g[0] for g in got] == pytest.approx([w[0] for w in want], abs=1e-4)


def test_greedy_continuation_is_flagged(lms) -> None:
    ours, _ = lms
    model = ours.model
    ctx = [5, 9, 11]
    with torch.no_grad():
        nxt = int(model(torch.tensor([ctx])).logits[0, -1].argmax())
    wrong = (nxt + 1) % model.config.vocab_size
    (_, hit), (_, miss) = ours._loglikelihood_tokens(
        [(("a", "b"), ctx, [nxt]), (("a", "b"), ctx, [wrong])]
    )
    assert hit and not miss


def test_empty_context_rejected(lms) -> None:
    ours, _ = lms
    with pytest.raises(ValueError, match="context and a continuation"):
        ours._loglikelihood_tokens([(("a", "b"), [], [4])])


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_latent_attention_models_match_hflm(lms, arch) -> None:
    """MLA models (their forward feeds key positions to every layer), with a final-logit
    soft-cap on the Gemma3 one: the head hook keeps everything the forward does."""
    from lm_eval.models.huggingface import HFLM

    from ..models.test_modeling_mla import _model

    ours, _ = lms
    model = _model(arch)
    if arch == "gemma3_text":
        model.config.base_config.final_logit_softcapping = 0.5
    kw = {"pretrained": model, "tokenizer": ours.tokenizer, "backend": "causal", "device": "cpu",
          "batch_size": 3, "max_length": 12}  # fmt: skip
    requests = _requests()
    got = ContinuationLM(**kw)._loglikelihood_tokens(requests)
    want = HFLM(**kw)._loglikelihood_tokens(requests)
    assert [g[1] for g in got] == [w[1] for w in want]
    assert [g[0] for g in got] == pytest.approx([w[0] for w in want], abs=1e-4)
