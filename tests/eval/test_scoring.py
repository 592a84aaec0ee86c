"""ContinuationLM scores exactly what lm-eval's HFLM scores, on a tiny random model."""

from __future__ import annotations

import pytest
import torch

from kvspec.eval import scoring
from kvspec.eval.scoring import ContinuationLM, pack
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


def test_greedy_flag_is_argmax_with_its_first_index_rule() -> None:
    logp = torch.log_softmax(torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 0.0, 1.0, 2.0]]), -1)
    top = logp.amax(-1)

    def greedy(cont: list[int]) -> bool:
        tokens = torch.tensor(cont)
        flag = scoring._greedy(logp, top, logp.gather(1, tokens[:, None]).squeeze(1), tokens)
        assert flag == bool((logp.argmax(-1) == tokens).all())
        return flag

    assert greedy([1, 0]) and not greedy([2, 0]) and not greedy([1, 3]) and not greedy([0, 0])
    g = torch.Generator().manual_seed(0)
    for _ in range(200):  # few-valued scores: ties everywhere
        logp = torch.randint(0, 3, (3, 5), generator=g).double()
        top = logp.amax(-1)
        greedy(torch.randint(0, 5, (3,), generator=g).tolist())
        greedy(logp.argmax(-1).tolist())


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


def _choices(seed: int, vocab: int = 100) -> list:
    """Multiple-choice requests: 5 contexts of 2-9 tokens, each with 2-4 continuations of 1-5
    tokens, interleaved as lm-eval lists them, plus two requests with a context of their own."""
    g = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    out = []
    for n_ctx, lengths in [(4, [1, 3, 2, 5]), (2, [2, 1]), (9, [4, 4, 1]), (6, [1, 1]),
                           (3, [5, 2, 3, 1])]:  # fmt: skip
        context = ids(n_ctx)
        out += [(("ctx", "cont"), context, ids(n)) for n in lengths]
    out += [(("ctx", "cont"), ids(5), ids(3)), (("ctx", "cont"), ids(8), ids(2))]
    return out


def _packed_rows(monkeypatch) -> list[int]:
    """Counts the rows scored through the packed path."""
    seen: list[int] = []
    real = scoring.packed_logprobs

    def counting(model, rows):
        seen.append(len(rows))
        return real(model, rows)

    monkeypatch.setattr(scoring, "packed_logprobs", counting)
    return seen


def _both(model, tok, requests, max_length: int = 16) -> tuple[list, list, list]:
    from lm_eval.models.huggingface import HFLM

    kw = {"pretrained": model, "tokenizer": tok, "backend": "causal", "device": "cpu",
          "batch_size": 3, "max_length": max_length}  # fmt: skip
    shared = ContinuationLM(**kw)
    separate = ContinuationLM(**kw)
    separate.share_contexts = False
    return (shared._loglikelihood_tokens(requests), separate._loglikelihood_tokens(requests),
            HFLM(**kw)._loglikelihood_tokens(requests))  # fmt: skip


def _same(got: list, want: list) -> None:
    assert [g[1] for g in got] == [w[1] for w in want]
    assert [g[0] for g in got] == pytest.approx([w[0] for w in want], abs=1e-4)


def test_shared_contexts_score_like_separate_rows(lms, monkeypatch) -> None:
    rows = _packed_rows(monkeypatch)
    requests = _choices(1)
    shared, separate, ref = _both(lms[0].model, lms[0].tokenizer, requests)
    assert rows == [1, 1, 1, 1, 1]  # five multiple-choice contexts, batches of <= 3 requests
    _same(shared, ref)
    _same(separate, ref)
    assert len({g[0] for g in shared}) == len(requests)  # no continuation was scored twice


def test_a_context_lm_eval_truncates_is_scored_on_its_own_row(lms, monkeypatch) -> None:
    rows = _packed_rows(monkeypatch)
    requests = _choices(2)
    shared, _, ref = _both(lms[0].model, lms[0].tokenizer, requests, max_length=9)
    _same(shared, ref)
    assert sum(rows) < 5  # (9, [4, 4, 1]) and (6, [1, 1])-like rows exceed 9 tokens: not packed


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_shared_contexts_in_latent_attention_models(lms, arch) -> None:
    """MLA models take the packed row's positions and mask (Gemma3: a 4-token window)."""
    from ..models.test_modeling_mla import _model

    requests = _choices(3, vocab=120)
    shared, _, ref = _both(_model(arch), lms[0].tokenizer, requests)
    _same(shared, ref)


def test_shared_contexts_in_a_sliding_window_model(lms) -> None:
    """Gemma-3 (sliding and full layers, two RoPE bases): a 4-token window cuts through the
    packed rows, so a continuation's slots must lose the context keys the window drops."""
    from ..tiny import sliding_gemma3

    model = sliding_gemma3(0)
    shared, _, ref = _both(model, lms[0].tokenizer, _choices(4))
    _same(shared, ref)


def test_pack_places_each_continuation_after_the_context() -> None:
    row = pack([5, 6, 7], [[1], [2, 3, 4]])
    assert row.tokens == [5, 6, 7, 2, 3]  # a continuation's last token is never fed
    assert row.positions == [0, 1, 2, 3, 4]
    assert row.reads == [[2], [2, 3, 4]]
    assert row.allowed[4].tolist() == [True, True, True, True, True]
    assert row.allowed[3].tolist() == [True, True, True, True, False]
    assert not row.allowed[:3, 3:].any()  # the context never sees a continuation


def test_packed_batches_hold_at_most_batch_size_requests() -> None:
    groups = [[0, 1, 2, 3], [4, 5], [6, 7], [8, 9, 10], [11, 12]]
    assert list(scoring._chunks(groups, 4)) == [[groups[0]], [groups[1], groups[2]],
                                                [groups[3]], [groups[4]]]  # fmt: skip
    assert list(scoring._chunks(groups, 3)) == [[g] for g in groups]  # a larger group alone
