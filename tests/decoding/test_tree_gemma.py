"""Document 002's drafters on a Gemma-3 target (sliding-window and full-attention layers, two
RoPE bases, scaled embedding): the tree forward applies the window as plain decoding does,
greedy chain and tree decoding with every head equal greedy decoding within and beyond the
window, a sliding-window cache is refused once it has dropped positions, every head trains."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import DynamicCache, Gemma3ForCausalLM, Gemma3TextConfig

from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.decoding.tree import ROOT, ChainTree, DraftTree, tree_generate, tree_logits
from kvspec.models.distil import Sequence
from kvspec.neural.head_train import HeadLoss, sequence_loss
from kvspec.neural.heads import build_head, make_drafter
from kvspec.neural.target_states import StateCache

WINDOW = 16
TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
DRAFTERS = {
    "moa": {"kind": "moa", "lsa_intermediate": 32, "sa_intermediate": 48, "ca_intermediate": 64},
    "eagle": {"kind": "eagle"},
    "independent": {"kind": "independent", "intermediate": 64},
}
SHORT = [[3, 17, 5, 9, 21], [40, 2, 19, 7, 7, 31]]  # prompt + 8 new tokens < WINDOW
LONG = [[(7 * i + 3) % 97 + 2 for i in range(22)]]  # past the window before decoding
TREE = DraftTree([7, 12, 2, 40, 5, 7], [ROOT, ROOT, 0, 0, 3, 1], [0.0] * 6)


def _gemma(seed: int = 0) -> Gemma3ForCausalLM:
    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=len(TYPES),
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
        sliding_window=WINDOW, layer_types=TYPES, max_position_embeddings=256,
        attn_implementation="sdpa",
    )  # fmt: skip
    model = Gemma3ForCausalLM(config).double().eval()
    return model.requires_grad_(False)  # frozen, as `train_head` makes it


@pytest.fixture(scope="module")
def target() -> Gemma3ForCausalLM:
    return _gemma()


def _plain_greedy(model, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding without a cache: the whole sequence, every step."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize("length", [6, 30])
def test_tree_forward_equals_each_branch_alone(target, length) -> None:
    """Row of node i = the next-token logits after prompt + path(i), computed plainly, also
    when the sliding layers' window cuts the prefix."""
    prompt = LONG[0][:length] if length <= len(LONG[0]) else (LONG[0] * 2)[:length]
    cache = DynamicCache()
    target(input_ids=torch.tensor([prompt[:-1]]), past_key_values=cache, use_cache=True)
    logits = tree_logits(target, cache, prompt[-1], TREE)  # (7, V)
    for i in range(-1, len(TREE.tokens)):
        ids = prompt + [TREE.tokens[a] for a in (TREE.path(i) if i >= 0 else [])]
        plain = target(input_ids=torch.tensor([ids])).logits[0, -1]
        torch.testing.assert_close(logits[i + 1], plain, rtol=0, atol=1e-10)


def test_a_sliding_window_cache_is_used_until_it_drops_positions(target) -> None:
    prompt = SHORT[0]
    cache = DynamicCache(config=target.config)  # sliding layers keep WINDOW - 1 positions
    target(input_ids=torch.tensor([prompt[:-1]]), past_key_values=cache, use_cache=True)
    logits = tree_logits(target, cache, prompt[-1], TREE)
    plain = target(input_ids=torch.tensor([prompt])).logits[0, -1]
    torch.testing.assert_close(logits[0], plain, rtol=0, atol=1e-10)
    cache = DynamicCache(config=target.config)
    target(input_ids=torch.tensor([LONG[0][:-1]]), past_key_values=cache, use_cache=True)
    with pytest.raises(ValueError, match="sliding-window cache layer"):
        tree_logits(target, cache, LONG[0][-1], TREE)


class _Oracle:
    """Drafts the true greedy continuation (every tree node is accepted)."""

    def __init__(self, sequence: list[int]) -> None:
        self.sequence = sequence

    def propose(self, context: list[int], k: int):
        from kvspec.decoding.drafts import Draft

        return Draft(self.sequence[len(context) : len(context) + k], None)


def test_accepted_paths_past_the_window_stay_greedy(target) -> None:
    prompt = LONG[0]
    want = _plain_greedy(target, prompt, 20)
    out, steps = tree_generate(target, prompt, ChainTree(_Oracle(prompt + want), 5), 20)
    assert out == want and max(s.accepted for s in steps) == 5


@pytest.mark.parametrize("kind", list(DRAFTERS))
@pytest.mark.parametrize("tree", [None, {"depth": 3, "topk": 2, "total": 6}])
def test_greedy_decoding_with_every_head_is_greedy_decoding(target, kind, tree) -> None:
    """Random heads: mostly rejected nodes, so the cache loses tree branches every step."""
    torch.manual_seed(1)
    head = build_head(target, DRAFTERS[kind])
    for prompt in SHORT + LONG:
        drafter = make_drafter(kind, head, target, tree)
        if tree is None:
            out, _ = speculative_generate(target, prompt, drafter, 8, 3)
        else:
            out, _ = tree_generate(target, prompt, drafter, 8)
        assert out == greedy_generate(target, prompt, 8) == _plain_greedy(target, prompt, 8)


@pytest.mark.parametrize("kind", list(DRAFTERS))
def test_every_head_trains_on_a_gemma_target(target, kind, tmp_path) -> None:
    torch.manual_seed(1)
    head = build_head(target, DRAFTERS[kind])
    ids = tuple(SHORT[1] + [4, 8, 15, 16, 23, 42, 9])  # 13 tokens, within the window
    states = StateCache(tmp_path, target, "tiny", 1, torch.float64).get
    loss, parts = sequence_loss(kind, head, target, Sequence("s", ids, 5), random.Random(0),
                                HeadLoss(), states)  # fmt: skip
    loss.backward()
    grads = [p.grad for p in head.parameters() if p.requires_grad]
    assert torch.isfinite(loss) and parts["loss"] > 0
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(float(g.abs().sum()) > 0 for g in grads)


def test_tli_runs_full_attention_layers_only(target) -> None:
    """TLI = 1 finishes with the last (full-attention) layer; TLI = 2 would need a window."""
    torch.manual_seed(1)
    prompt = LONG[0]
    head = build_head(target, {**DRAFTERS["moa"], "tli": 1})
    drafter = make_drafter("moa", head, target, {"depth": 3, "topk": 2, "total": 6})
    assert tree_generate(target, prompt, drafter, 8)[0] == greedy_generate(target, prompt, 8)
    with pytest.raises(ValueError, match="sliding-window target layers"):
        build_head(target, {**DRAFTERS["moa"], "tli": 2})  # refused before any forward
