"""The Independent drafter answers like a causal LM, so the draft-model tree drafter grows
EAGLE-2 trees with it; greedy tree decoding with it is greedy decoding."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from kvspec.decoding.draft_model import ModelTreeDrafter
from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.tree import causal_mask, tree_generate
from kvspec.neural.independent import IndependentHead
from tests.tiny import tree_llama

PROMPTS = [[3, 17, 5, 9, 21], [5, 5, 5, 5], [40, 2, 19, 7, 7, 31]]


def test_explicit_causal_mask_and_positions_change_nothing() -> None:
    target = tree_llama(0)
    torch.manual_seed(1)
    head = IndependentHead(target, layers=1, intermediate=48)
    ids = torch.tensor([[3, 17, 5, 9]])
    with torch.no_grad():
        plain = head(ids, DynamicCache(), use_cache=True).logits
        mask = causal_mask(0, 4, plain.dtype)
        given = head(ids, DynamicCache(), use_cache=True, attention_mask=mask,
                     position_ids=torch.arange(4)[None]).logits  # fmt: skip
    torch.testing.assert_close(given, plain, rtol=0, atol=0)


def test_greedy_tree_decoding_with_the_head_is_greedy_decoding() -> None:
    target = tree_llama(0)
    torch.manual_seed(1)
    head = IndependentHead(target, layers=1, intermediate=48).eval()
    for prompt in PROMPTS:
        drafter = ModelTreeDrafter(head, depth=3, topk=2, total=6)
        out, steps = tree_generate(target, prompt, drafter, 16)
        assert out == greedy_generate(target, prompt, 16)
        assert max(s.drafted for s in steps) <= 6
