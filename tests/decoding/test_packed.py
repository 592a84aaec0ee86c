"""The packed decode engine (kvspec.decoding.packed): the kernel computes x W^T (+ b) to float32
accuracy for float32 and bfloat16 weights, every row independently of the rows beside it (a
one-token step and a q-token verification give the same numbers), and a model loaded with it
decodes every method of the speed benchmark exactly like its own greedy decoding."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from kvspec.decoding import packed
from kvspec.decoding.bench import run_benchmark
from kvspec.decoding.bench_summary import mark_divergence
from kvspec.decoding.loop import greedy_generate
from kvspec.models.load import load_weights
from kvspec.ngram.methods import DecodeSettings, Setup, benchmark_methods, open_engines
from kvspec.ngram.registry import METHODS

from ..tiny import tiny_indexes, tiny_llama

SHAPES = [(576, 576), (49, 100), (200, 130), (16, 64), (1, 7)]  # (out, in): ragged tails too


KERNEL_ENGINES = ["packed", "packed-bf16", "packed-int8"]


def _reference(x: torch.Tensor, w: torch.Tensor, engine: str) -> torch.Tensor:
    return x.double() @ packed.as_computed(w, engine).double().T


@pytest.mark.parametrize("engine", KERNEL_ENGINES)
@pytest.mark.parametrize("shape", SHAPES)
def test_kernel_computes_the_product(engine: str, shape: tuple[int, int]) -> None:
    out, width = shape
    gen = torch.Generator().manual_seed(out * width)
    w, x = torch.randn(out, width, generator=gen), torch.randn(3, 5, width, generator=gen)
    got = packed.kernel().linear(x, packed.pack_weight(w, engine), out)
    assert got.shape == (3, 5, out) and got.dtype == torch.float32
    want = _reference(x, w, engine)
    assert (got.double() - want).abs().max() <= 1e-5 * (1 + want.abs().max())


@pytest.mark.parametrize("engine", KERNEL_ENGINES)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_row_does_not_depend_on_the_rows_beside_it(engine: str, shape: tuple[int, int]) -> None:
    out, width = shape
    gen = torch.Generator().manual_seed(7)
    w, x = torch.randn(out, width, generator=gen), torch.randn(19, width, generator=gen)
    weight = packed.pack_weight(w, engine)
    whole = packed.kernel().linear(x, weight, out)
    for rows in range(1, 20):  # every tile shape and remainder the kernel has
        assert torch.equal(packed.kernel().linear(x[:rows], weight, out), whole[:rows]), rows
        alone = packed.kernel().linear(x[rows - 1 : rows], weight, out)
        assert torch.equal(alone, whole[rows - 1 : rows]), rows


@pytest.mark.parametrize("engine", KERNEL_ENGINES)
def test_the_kernel_uses_every_thread_and_threads_do_not_change_it(engine: str) -> None:
    if "ATen parallel backend: OpenMP" in torch.__config__.parallel_info():
        assert packed.kernel().openmp(), "built without -fopenmp: every call on one thread"
    gen = torch.Generator().manual_seed(3)
    w, x = torch.randn(200, 130, generator=gen), torch.randn(9, 130, generator=gen)
    weight, threads = packed.pack_weight(w, engine), torch.get_num_threads()
    try:
        runs = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            runs.append(packed.kernel().linear(x, weight, 200))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


def _norms():
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    return [LlamaRMSNorm(576, eps=1e-5), Gemma3RMSNorm(256, eps=1e-6), LlamaRMSNorm(13)]


@pytest.mark.parametrize("norm", _norms(), ids=lambda n: f"{type(n).__name__}-{n.weight.numel()}")
def test_packed_rms_norms_match_the_model_and_each_row_stands_alone(norm) -> None:
    gen = torch.Generator().manual_seed(norm.weight.numel())
    with torch.no_grad():
        norm.weight.copy_(torch.randn(norm.weight.shape, generator=gen) * 0.5)
    x = torch.randn(2, 7, norm.weight.numel(), generator=gen) * 3
    want = norm(x).detach()
    packed.pack_linears(torch.nn.Sequential(norm), "packed")
    assert "forward" in vars(norm) and not norm.weight.requires_grad
    got = norm(x)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not torch.equal(got, x)  # the norm did something
    for i in range(7):  # one row alone or beside others: the same bits
        assert torch.equal(norm(x[:, i : i + 1]), got[:, i : i + 1])


def test_a_norm_whose_formula_changed_is_refused(monkeypatch) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    class LlamaRMSNormChanged(LlamaRMSNorm):  # a release whose norm computes something else
        def forward(self, x):
            return super().forward(x) + x

    monkeypatch.setitem(packed.NORMS, "LlamaRMSNormChanged", packed.NORMS["LlamaRMSNorm"])
    with pytest.raises(RuntimeError, match="no longer matches"):
        packed.pack_linears(torch.nn.Sequential(LlamaRMSNormChanged(32)), "packed")


def test_pack_linears_keeps_bias_and_weights_and_stops_gradients() -> None:
    layer = torch.nn.Linear(40, 33)
    x = torch.randn(4, 40)
    want = layer(x).detach()
    model = packed.pack_linears(torch.nn.Sequential(layer), "packed")
    assert torch.allclose(model(x), want, atol=1e-5)
    assert model[0].weight.shape == (33, 40) and not model[0].weight.requires_grad
    untouched = packed.pack_linears(torch.nn.Sequential(torch.nn.Linear(2, 2)), "torch")
    assert "forward" not in vars(untouched[0]) and packed.engine_of(untouched) == "torch"


def test_the_engine_refuses_what_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="resources.linear must be one of"):
        packed.check_engine("fast")
    with pytest.raises(ValueError, match="packs float32 CPU weights"):
        packed.pack_linears(torch.nn.Linear(4, 4).double(), "packed")
    with pytest.raises(RuntimeError, match="float32 CPU inputs"):
        layer = packed.pack_linears(torch.nn.Linear(4, 4), "packed")
        layer(torch.zeros(1, 4, dtype=torch.float64))


def test_packing_makes_several_positions_attend_grouped_without_copies(monkeypatch) -> None:
    """After packing, a forward of several positions (a verification step, causal mask) hands
    SDPA the KV heads as grouped-query attention instead of copying them per query head
    (repeat_kv), and its logits are bit-identical to the copying path's."""
    from transformers import DynamicCache
    from transformers.integrations import sdpa_attention

    model = tiny_llama(3, vocab=64, hidden=32, intermediate=64, double=False)  # 4 heads, 2 KV
    context, fed = torch.arange(1, 20).view(1, -1), torch.tensor([[5, 9, 2, 7]])

    def logits() -> torch.Tensor:
        cache = DynamicCache()
        with torch.inference_mode():
            model(input_ids=context, past_key_values=cache, use_cache=True)
            return model(input_ids=fed, past_key_values=cache, use_cache=True).logits

    monkeypatch.delenv(packed.NATIVE_GQA[0], raising=False)
    copies = []
    original = sdpa_attention.repeat_kv
    monkeypatch.setattr(
        sdpa_attention, "repeat_kv", lambda h, n: copies.append(n) or original(h, n)
    )
    before = logits()
    assert copies  # transformers copies the KV heads by default
    packed.pack_linears(model, "packed")
    assert os.environ[packed.NATIVE_GQA[0]] == packed.NATIVE_GQA[1]
    copies.clear()
    monkeypatch.setenv(packed.NATIVE_GQA[0], "0")  # the linear layers packed, attention as before
    copying = logits()
    monkeypatch.setenv(packed.NATIVE_GQA[0], "1")
    n_copies, grouped = len(copies), logits()
    assert n_copies and len(copies) == n_copies  # no copy with the engine's setting
    assert torch.equal(grouped, copying)
    assert torch.allclose(grouped, before, atol=1e-4)


VOCAB, EOS, NEW = 128, 127, 12


# (target's engine, draft's engine): resources.linear and resources.draft_linear (mini: a
# bfloat16 or int8 draft proposing for a float32 target)
ENGINE_PAIRS = [("packed", "packed"), ("packed-bf16", "packed-bf16"), ("packed", "packed-bf16"),
                ("packed", "packed-int8")]  # fmt: skip


@pytest.fixture(scope="module", params=ENGINE_PAIRS, ids="-".join)
def setup(request, tmp_path_factory) -> Setup:
    """Target and draft saved and loaded the way the rules load them, in the packed engines."""
    loaded = []
    for seed, hidden, engine in ((0, 64, request.param[0]), (1, 32, request.param[1])):
        path = tmp_path_factory.mktemp(f"model{seed}")
        tiny_llama(seed, vocab=VOCAB, hidden=hidden, intermediate=2 * hidden, double=False,
                   eos_token_id=EOS, pad_token_id=EOS).save_pretrained(path)  # fmt: skip
        loaded.append(_load(path, engine))
    decode = DecodeSettings.defaults(k=4, draft_k=3, confidence=0.0, min_match=1)
    engines = open_engines(tiny_indexes(tmp_path_factory, VOCAB, EOS), max_support=1000)
    return Setup(loaded[0], [EOS], NEW, decode, draft=loaded[1], engines=engines)


def _load(path, engine: str) -> torch.nn.Module:
    model = load_weights(path, linear=engine)
    layers = [m for m in model.modules()
              if isinstance(m, torch.nn.Linear) or type(m).__name__ in packed.NORMS]  # fmt: skip
    assert len(layers) > 7 and all("forward" in vars(m) for m in layers)  # every one packed
    return model


LOCAL = [m for m in METHODS if m != "sd_suffix_decoding" and not m.startswith("llamacpp_")]


def test_every_method_decodes_like_greedy_in_the_packed_engine(setup) -> None:
    rng = np.random.default_rng(1)
    prompts = [(f"p{i}", rng.integers(0, EOS, 6 + i).tolist()) for i in range(3)]
    records = run_benchmark(benchmark_methods(setup, LOCAL, ["greedy"]), prompts)
    mark_divergence(setup.target, records, prompts)
    for r in records:
        want = greedy_generate(setup.target, dict(prompts)[r["prompt"]], NEW, [EOS])
        assert r["exact"] and r["tokens"] == want, r["method"]


def test_a_reduced_readout_is_packed_and_drafts_inside_its_subset() -> None:
    from kvspec.models.draft_vocab import ReducedHead

    head = ReducedHead([3, 9, 40], hidden=24, vocab_size=50)
    torch.nn.init.normal_(head.weight)
    x = torch.randn(2, 24)
    want = head(x).detach()
    model = packed.pack_linears(torch.nn.Sequential(head), "packed")
    got = model(x)
    assert "reduced" in vars(head) and packed.engine_of(model) == "packed"
    assert torch.allclose(got[:, [3, 9, 40]], want[:, [3, 9, 40]], atol=1e-5)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    assert (got[:, [0, 1, 49]] == torch.finfo(torch.float32).min).all()
