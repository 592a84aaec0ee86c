"""The lean Llama forward: transformers' logits for every way the drafters feed a model."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM

from kvspec.decoding.cache import crop_to
from kvspec.decoding.draft_model import DraftModelDrafter, ModelTreeDrafter
from kvspec.decoding.lean import LeanLlama, StaticKV, lean_forward
from kvspec.decoding.packed import pack_linears
from kvspec.models.draft_vocab import attach_reduced_head
from kvspec.sampling.three_model import CachedScorer

from ..tiny import tiny_llama

VOCAB = 64


def _models(engine: str) -> torch.nn.Module:
    model = tiny_llama(3, vocab=VOCAB, layers=3, double=engine == "torch")
    return pack_linears(model, engine)


def _pair(model: torch.nn.Module, lean: LeanLlama, feeds, *, atol: float) -> None:
    """Feed both forwards the same chunks (a crop to n before a chunk when given as (n, ids)):
    equal logits and equal cache lengths after each."""
    ours, theirs = lean.new_cache(), DynamicCache()
    for feed in feeds:
        if isinstance(feed, tuple):
            keep, feed = feed
            crop_to(ours, keep)
            crop_to(theirs, keep)
        ids = torch.tensor([feed])
        with torch.inference_mode():
            want = model(input_ids=ids, past_key_values=theirs, use_cache=True).logits
            got = lean(input_ids=ids, past_key_values=ours).logits
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=atol, rtol=0)
        assert ours.get_seq_length() == theirs.get_seq_length()


@pytest.mark.parametrize("engine", ["torch", "packed", "packed-bf16", "packed-int8"])
def test_lean_logits_equal_transformers_for_prefill_steps_chunks_and_crops(engine) -> None:
    model = _models(engine)
    lean = lean_forward(model)
    assert isinstance(lean, LeanLlama)
    assert (lean.step is None) == (engine == "torch")  # packed models step in one call
    feeds = [list(range(3, 23)), [5], [9], [40, 2, 7], (21, [11]), [12, 13], (4, [50, 51, 52]),
             [1]]  # fmt: skip
    _pair(model, lean, feeds, atol=1e-10 if engine == "torch" else 2e-5)


def test_lean_logits_equal_transformers_with_a_reduced_readout() -> None:
    model = tiny_llama(5, vocab=VOCAB, double=False)
    attach_reduced_head(model, list(range(0, VOCAB, 3)))
    pack_linears(model, "packed-bf16")
    lean = lean_forward(model)
    assert lean.step is not None
    _pair(model, lean, [[4, 8, 15, 16, 23, 42], [7], [9], (5, [1]), [1, 2]], atol=2e-5)


def test_the_one_call_step_equals_the_modules_step_over_a_growing_cache(monkeypatch) -> None:
    """Single positions and chained ones, through the cache's doubling (a first capacity of 2
    positions) and crops: the C++ call and the module path give the same logits and leave the
    same keys and values."""
    from kvspec.decoding import lean as lean_module

    monkeypatch.setattr(lean_module, "FIRST_CAPACITY", 2)
    model = pack_linears(tiny_llama(9, vocab=VOCAB, layers=2, double=False), "packed")
    one = lean_forward(model)
    modules = lean_forward(model)
    modules.step = None
    a, b = one.new_cache(), modules.new_cache()
    one(input_ids=torch.tensor([[1, 2, 3]]), past_key_values=a)
    modules(input_ids=torch.tensor([[1, 2, 3]]), past_key_values=b)
    for i, chunk in enumerate([[5], [6, 7], [8], [9, 10, 11], [12], [13], [14, 15], [16]]):
        if i == 5:
            crop_to(a, 4)
            crop_to(b, 4)
        x = torch.tensor([chunk])
        got = one(input_ids=x, past_key_values=a).logits
        want = modules(input_ids=x, past_key_values=b).logits
        assert got.shape == want.shape == (1, len(chunk), VOCAB)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=0)
    assert a.length == b.length == 8 and a.keys.shape[2] == 16  # 11 positions at most
    n = a.length
    torch.testing.assert_close(a.keys[:, :, :n], b.keys[:, :, :n], atol=1e-5, rtol=0)
    torch.testing.assert_close(a.values[:, :, :n], b.values[:, :, :n], atol=1e-5, rtol=0)


def test_a_tree_grown_through_the_lean_forward_is_transformers_tree() -> None:
    model = tiny_llama(7, vocab=VOCAB, layers=2)
    lean_tree = ModelTreeDrafter(model, 4, 3, 10)
    hf_tree = ModelTreeDrafter(model, 4, 3, 10)
    hf_tree.forward = model  # transformers' own forward
    assert isinstance(lean_tree.forward, LeanLlama)
    for context in ([1, 2, 3, 4], [1, 2, 3, 4, 9, 9], [30, 31]):
        a, b = lean_tree.propose_tree(context, 4), hf_tree.propose_tree(context, 4)
        assert a.tokens == b.tokens and a.parents == b.parents
        assert a.scores == pytest.approx(b.scores, abs=1e-9)


@pytest.mark.parametrize("sample", [False, True])
def test_a_draft_proposes_through_the_lean_forward_what_transformers_would(sample) -> None:
    model = tiny_llama(11, vocab=VOCAB, layers=2)
    lean = DraftModelDrafter(model, sample=sample, seed=3)
    hf = DraftModelDrafter(model, sample=sample, seed=3)
    hf.forward = model
    assert isinstance(lean.forward, LeanLlama)
    context = [3, 1, 4, 1, 5]
    for _ in range(4):  # the cache is reused and cropped across calls
        a, b = lean.propose(context, 5), hf.propose(context, 5)
        assert a.tokens == b.tokens
        torch.testing.assert_close(a.q, b.q, atol=1e-9, rtol=0)
        context = [*context, *a.tokens[:2], 7]


def test_the_middle_model_of_three_model_sampling_scores_through_the_lean_forward() -> None:
    model = tiny_llama(13, vocab=VOCAB, layers=2)
    lean, hf = CachedScorer(model, 0.7, 0.9), CachedScorer(model, 0.7, 0.9)
    hf.forward = model
    assert isinstance(lean.forward, LeanLlama)
    for context, tokens in (([1, 2, 3], [4, 5]), ([1, 2, 3, 4, 5], [6]), ([9, 8], [7, 6, 5])):
        torch.testing.assert_close(lean.rows(context, tokens), hf.rows(context, tokens),
                                   atol=1e-9, rtol=0)  # fmt: skip


def test_other_architectures_keep_their_own_forward() -> None:
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=8)  # fmt: skip
    qwen = Qwen3ForCausalLM(config).eval()
    assert lean_forward(qwen) is qwen
    biased = tiny_llama(1, vocab=VOCAB, attention_bias=True)
    assert lean_forward(biased) is biased
    with pytest.raises(ValueError, match="plain Llama"):
        LeanLlama(qwen)


def test_the_lean_forward_refuses_a_batch_a_two_dimensional_mask_and_another_cache() -> None:
    lean = lean_forward(tiny_llama(1, vocab=VOCAB))
    with pytest.raises(ValueError, match="one sequence"):
        lean(input_ids=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="4-D"):
        lean(input_ids=torch.zeros(1, 3, dtype=torch.long), attention_mask=torch.ones(1, 3))
    with pytest.raises(TypeError, match="StaticKV"):
        lean(input_ids=torch.zeros(1, 3, dtype=torch.long), past_key_values=DynamicCache())


def test_a_static_cache_crops_as_transformers_cache() -> None:
    cache = StaticKV(2, 2, 4, dtype=torch.float32, device="cpu", capacity=8)
    cache.length = 6
    cache.crop(-2)
    assert cache.get_seq_length() == 4
    cache.crop(9)
    assert cache.length == 4
    cache.crop(1)
    assert cache.length == 1
    cache.reserve(20)
    assert cache.keys.shape == (2, 2, 32, 4)


def test_the_one_call_step_refuses_weights_that_do_not_fit() -> None:
    """The C++ call checks every width it reads before touching memory."""
    model = pack_linears(tiny_llama(2, vocab=VOCAB, layers=2, double=False), "packed")
    step = lean_forward(model).step
    cache = lean_forward(model).new_cache()
    cos, sin = lean_forward(model).rope_table(1)
    x0 = model.model.embed_tokens.weight[:1].contiguous()
    args = (x0, 0, cos[:1].contiguous(), sin[:1].contiguous())
    tail = (step.n_out, cache.keys, cache.values, 4, step.eps)
    swapped = [*step.packed]
    swapped[0], swapped[6] = swapped[6], swapped[0]  # q and down: other widths
    with pytest.raises(RuntimeError, match="do not fit|differs"):
        step.run(*args, step.norms, swapped, *tail)
    with pytest.raises(RuntimeError, match="norm"):
        step.run(*args, [step.norms[0][:-1], *step.norms[1:]], step.packed, *tail)
    with pytest.raises(RuntimeError, match="2 norms"):
        step.run(*args, step.norms[:-1], step.packed, *tail)
