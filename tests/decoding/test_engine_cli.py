"""The engine benchmark's MKL-packed variant computes what the model computes, and undoes
itself (so the variants after it measure the plain model)."""

from __future__ import annotations

import torch

from kvspec.decoding.engine_cli import packed_linears
from tests.tiny import tree_llama


def test_packed_linears_give_the_same_logits_and_are_undone() -> None:
    model = tree_llama(0).float()  # the packed kernel is float32 only
    ids = torch.tensor([[3, 17, 5, 9, 21, 4]])  # (1, 6)
    with torch.inference_mode():
        plain = model(input_ids=ids).logits
        with packed_linears(model):
            packed = model(input_ids=ids).logits
            patched = [m for m in model.modules() if "forward" in vars(m)]
        after = model(input_ids=ids).logits
    assert patched, "no linear layer was packed"
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)
    assert not [m for m in model.modules() if "forward" in vars(m)]
    assert torch.equal(after, plain)


def test_module_norms_restore_the_models_own_norms_and_then_the_fused_ones() -> None:
    from kvspec.decoding.engine_cli import module_norms
    from kvspec.decoding.packed import NORMS, pack_linears

    model = pack_linears(tree_llama(0).float(), "packed")
    norms = [m for m in model.modules() if type(m).__name__ in NORMS]
    fused = [vars(m)["forward"] for m in norms]
    ids = torch.tensor([[3, 17, 5, 9, 21, 4]])
    with torch.inference_mode():
        before = model(input_ids=ids).logits
        with module_norms(model):
            assert norms and not any("forward" in vars(m) for m in norms)
            own = model(input_ids=ids).logits
        assert [vars(m)["forward"] for m in norms] == fused
        torch.testing.assert_close(own, before, rtol=1e-4, atol=1e-4)
        assert torch.equal(model(input_ids=ids).logits, before)
