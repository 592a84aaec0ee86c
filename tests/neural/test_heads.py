"""Document 002's drafters as stage pieces: heads built from their declarations survive a
save/load round trip, and every head's chain and tree methods reproduce greedy decoding."""

from __future__ import annotations

import pytest
import torch

from kvspec.decoding.bench import run_benchmark
from kvspec.decoding.bench_summary import summarize
from kvspec.decoding.loop import greedy_generate
from kvspec.neural.heads import build_head, load_head, neural_methods
from kvspec.ngram.methods import DecodeSettings, Setup

from ..tiny import tiny_llama

DRAFTERS = {
    "ours": {"kind": "moa", "tli": 1, "lsa_intermediate": 16, "sa_intermediate": 16,
             "ca_intermediate": 32},
    "eagle": {"kind": "eagle"},
    "independent": {"kind": "independent", "layers": 1, "intermediate": 32},
}  # fmt: skip


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, layers=3)


def test_unknown_kind_is_an_error(target) -> None:
    with pytest.raises(ValueError, match="drafter kind must be one of"):
        build_head(target, {"kind": "medusa"})


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_a_saved_head_loads_with_its_weights(target, name, tmp_path) -> None:
    torch.manual_seed(3)
    head = build_head(target, DRAFTERS[name])
    path = tmp_path / f"{name}.pt"
    torch.save({"drafter": DRAFTERS[name], "state": head.state_dict()}, path)
    loaded, decl = load_head(path, target)
    assert decl == DRAFTERS[name] and not loaded.training
    for key, value in head.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)


def test_every_chain_and_tree_method_is_greedy_decoding(target) -> None:
    torch.manual_seed(4)
    heads = {n: (build_head(target, d).eval(), d) for n, d in DRAFTERS.items()}
    setup = Setup(target, [], 12, DecodeSettings.defaults(k=4, draft_k=4))
    methods = neural_methods(setup, heads, 3, {"depth": 3, "topk": 2, "total": 5})
    assert sorted(methods) == sorted(f"{n}/{m}" for n in DRAFTERS for m in ("chain", "tree"))
    prompts = [("a", [3, 17, 5, 9, 21]), ("b", [5, 5, 5, 5])]
    for name, method in methods.items():
        for _, prompt in prompts:
            run = method(prompt)
            assert run.tokens == greedy_generate(target, prompt, 12), name
            assert (
                run.forwards == run.steps
                and run.drafted <= (5 if "tree" in name else 3) * run.steps
            )


def test_tree_methods_are_summarised_beside_greedy(target) -> None:
    from kvspec.decoding.bench_summary import mark_divergence
    from kvspec.ngram.methods import build_method

    setup = Setup(target, [], 8, DecodeSettings.defaults(k=4, draft_k=4))
    heads = {"eagle": (build_head(target, DRAFTERS["eagle"]).eval(), DRAFTERS["eagle"])}
    methods = {"greedy": build_method("greedy", setup),
               **neural_methods(setup, heads, 2, {"depth": 2, "topk": 2, "total": 3})}  # fmt: skip
    prompts = [("a", [3, 17, 5])]
    records = run_benchmark(methods, prompts, baseline_repeats=2)
    mark_divergence(target, records, prompts)
    summary = summarize(records, unstable_spread=0.1)
    assert list(summary["method"]) == ["greedy", "eagle/chain", "eagle/tree"]
    assert (summary["exact_vs_greedy"] == 1.0).all()
