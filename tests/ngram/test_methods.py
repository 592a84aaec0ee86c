"""Timed benchmark runs: every method decodes like greedy; summaries compute the right ratios."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM

from kvspec.decoding.bench import ForwardCounter, run_benchmark
from kvspec.decoding.bench_summary import mark_divergence, summarize
from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.prompts import bench_prompts
from kvspec.decoding.tree import tree_generate
from kvspec.ngram.drafters import PromptLookupDrafter, RequestSuffixDrafter
from kvspec.ngram.methods import (
    TREE_DRAFTERS,
    DecodeSettings,
    Setup,
    benchmark_methods,
    build_method,
    make_drafter,
    open_engines,
)
from kvspec.ngram.registry import METHODS

from ..tiny import tiny_indexes, tiny_llama

VOCAB, EOS, NEW = 128, 127, 12


def _llama(seed: int, hidden: int) -> LlamaForCausalLM:
    return tiny_llama(seed, vocab=VOCAB, hidden=hidden, intermediate=2 * hidden,
                      eos_token_id=EOS, pad_token_id=EOS)  # fmt: skip


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    target, draft = _llama(0, 64), _llama(1, 32)
    engines = open_engines(tiny_indexes(tmp_path_factory, VOCAB, EOS), max_support=1000)
    decode = DecodeSettings.defaults(k=4, draft_k=3, confidence=0.0, min_match=1)
    return Setup(target, [EOS], NEW, decode, draft=draft, engines=engines)


@pytest.fixture(scope="module")
def prompts() -> list[tuple[str, list[int]]]:
    rng = np.random.default_rng(1)
    return [(f"p{i}", rng.integers(0, EOS, 6 + i).tolist()) for i in range(3)]


# sd_suffix_decoding needs Arctic Inference's suffix tree built (tests/ngram/test_suffix_peer.py),
# llamacpp_* llama.cpp built and a GGUF file (tests/ngram/test_llamacpp_peer.py)
LOCAL = [m for m in METHODS if m != "sd_suffix_decoding" and not m.startswith("llamacpp_")]


def test_every_method_decodes_like_greedy(setup, prompts):
    methods = benchmark_methods(setup, LOCAL, ["greedy"])
    records = run_benchmark(methods, prompts)
    mark_divergence(setup.target, records, prompts)
    for r in records:
        assert r["exact"], r["method"]
        want = greedy_generate(setup.target, dict(prompts)[r["prompt"]], NEW, [EOS])
        assert r["tokens"] == want
    summary = summarize(records, unstable_spread=0.1).set_index("method")
    assert list(summary.index) == LOCAL
    assert summary.loc["greedy", "accept_len"] == 1.0 == summary.loc["hf_greedy", "accept_len"]
    assert summary.loc["greedy", "speedup"] == 1.0
    assert (summary["exact_vs_greedy"] == 1.0).all()


def _one_per_kind() -> list[str]:
    """The first local method of every (loop, drafter, adaptive) combination."""
    kinds: dict[tuple, str] = {}
    for name in LOCAL:
        decl = METHODS[name]
        kinds.setdefault((decl.loop, decl.drafter, decl.adaptive, decl.fallback), name)
    return list(kinds.values())


@pytest.mark.parametrize("name", _one_per_kind())
def test_every_kind_of_method_decodes_like_greedy_on_a_second_device(
    name, second_device, setup, prompts
):
    """The paper scale decodes on GPUs: with the target and the draft on another device
    (tests/second_device.py) every kind of method still gives the CPU's greedy tokens."""
    target, draft = _llama(0, 64).to(second_device), _llama(1, 32).to(second_device)
    moved = replace(setup, target=target, draft=draft)
    _, prompt = prompts[0]
    want = greedy_generate(setup.target, prompt, NEW, [EOS])
    assert build_method(name, moved)(prompt).tokens == want


def test_a_call_s_budget_cuts_every_method_s_answer_to_greedy_s_first_tokens(setup, prompts):
    """The speed jobs' short warm-up (spec.speed.warmup_tokens): every method, as the rule
    builds it, stops at the budget one call gives, and later calls keep the method's own."""
    methods = benchmark_methods(setup, LOCAL, ["greedy"])
    _, prompt = prompts[0]
    want = greedy_generate(setup.target, prompt, NEW, [EOS])
    assert len(want) > 3  # the budget binds
    for name, fn in methods.items():
        assert fn(prompt, 3).tokens == want[:3], name
        assert fn(prompt).tokens == want, name


def test_sample_mode_variants_are_named_and_not_compared(setup, prompts):
    methods = benchmark_methods(
        setup, ["greedy", "sd_infgram_target", "hf_greedy"], ["greedy", "sample"]
    )
    assert list(methods) == ["greedy", "sd_infgram_target", "hf_greedy", "sd_infgram_target@sample"]
    records = run_benchmark(methods, prompts[:1])
    mark_divergence(setup.target, records, prompts)
    sampled = [r for r in records if r["method"].endswith("@sample")]
    assert sampled[0]["exact"] is None  # a sample is not compared with greedy
    assert 0 < len(sampled[0]["tokens"]) <= NEW  # (it may draw a stop before the budget)


def test_a_draft_confidence_cut_off_keeps_sd_draft_exact_and_drafts_less(setup, prompts):
    """sd_draft with spec.decode.draft_confidence, through the method the speed jobs build:
    greedy tokens on every prompt, fewer drafted tokens than at a fixed depth."""
    runs = {}
    for cut in (0.0, 0.3):
        cut_setup = replace(setup, decode=replace(setup.decode, draft_confidence=cut))
        method = build_method("sd_draft", cut_setup)
        runs[cut] = [method(ids) for _, ids in prompts]
    for (_, ids), run in zip(prompts, runs[0.3], strict=True):
        assert run.tokens == greedy_generate(setup.target, ids, NEW, [EOS])
    drafted = {cut: sum(r.drafted for r in rs) for cut, rs in runs.items()}
    steps = {cut: sum(r.steps for r in rs) for cut, rs in runs.items()}
    assert 0 < drafted[0.3] < drafted[0.0] and drafted[0.3] >= steps[0.3] - len(prompts)


@pytest.mark.parametrize(
    ("local", "kind"), [("suffix", RequestSuffixDrafter), ("prompt_lookup", PromptLookupDrafter)]
)
def test_hybrid_local_drafter_and_longest_draft_come_from_the_config(setup, prompts, local, kind):
    """spec.decode.adaptive.local picks the hybrid's request-local drafter and adaptive.k its
    longest draft; through the speed jobs' entry point the tokens stay greedy's."""
    for adaptive_k in (1, 6):
        decode = replace(setup.decode, local=local, adaptive_k=adaptive_k)
        drafter, k = make_drafter("sd_hybrid_target", replace(setup, decode=decode))
        assert k == adaptive_k and isinstance(drafter.drafters["local"], kind)
        method = build_method("sd_hybrid_target", replace(setup, decode=decode))
        runs = [method(ids) for _, ids in prompts]
        for (_, ids), run in zip(prompts, runs, strict=True):
            assert run.tokens == greedy_generate(setup.target, ids, NEW, [EOS])
        assert sum(r.drafted for r in runs) <= adaptive_k * sum(r.steps for r in runs)


def test_the_draft_model_fallback_drafts_on_weak_steps_only_and_stays_greedy(setup, prompts):
    """sd_hybrid_target_draft as the speed jobs build it: greedy tokens whether the draft
    model is never (gate 0) or always (a gate no n-gram draft reaches) consulted; its drafts
    hold at most spec.decode.adaptive.fallback.k tokens."""
    for gate in (0.0, 100.0):
        fallback = {"gate": gate, "k": 2}
        gated = replace(setup, decode=replace(setup.decode, fallback=fallback))
        method = build_method("sd_hybrid_target_draft", gated)
        for _, ids in prompts:
            assert method(ids).tokens == greedy_generate(setup.target, ids, NEW, [EOS])
        decl = METHODS["sd_hybrid_target_draft"]
        branches = TREE_DRAFTERS["hybrid"]("sd_hybrid_target_draft", decl, gated)
        asked = _asked(branches)
        tree_generate(setup.target, prompts[0][1], branches, NEW, [EOS])
        adaptive = branches.adaptive
        assert adaptive.fallback is not None and adaptive.fallback.k == 2
        assert len(asked) > 1 and adaptive.consulted == (len(asked) if gate else 0)
    assert METHODS["sd_hybrid_target_branches"].fallback is None


def _asked(drafter: Any) -> list[int]:
    """The depths the loop asks `drafter`'s trees for, one per step that drafts."""
    asked: list[int] = []
    propose = drafter.propose_tree
    drafter.propose_tree = lambda ctx, depth: asked.append(depth) or propose(ctx, depth)
    return asked


def test_sampled_sd_draft_with_a_cut_off_keeps_the_target_law():
    """sd_draft@sample with a confidence cut-off, built as the speed jobs build it: the first
    three tokens over 2,000 seeds follow the target's law (chi-square), although drafts end
    where the draft is unsure."""
    from scipy.stats import chisquare

    from kvspec.decoding.warp import warp
    from kvspec.seeds import derive

    vocab, prompt = 5, [1, 3, 2]
    target, draft = (tiny_llama(s, vocab=vocab, hidden=16, intermediate=32, layers=1, double=True)
                     for s in (3, 5))  # fmt: skip
    with torch.no_grad():
        target.lm_head.weight.mul_(8.0)
        draft.lm_head.weight.mul_(6.0)
    decode = DecodeSettings.defaults(k=4, draft_k=3, draft_confidence=0.6)
    base = Setup(target, [], 3, decode, mode="sample", draft=draft)
    counts = np.zeros((vocab,) * 3, dtype=np.int64)
    drafted = {0.6: 0, 0.0: 0}
    for c in range(2000):
        run = build_method("sd_draft", replace(base, seed=derive(7, "law", c)))(prompt)
        counts[tuple(run.tokens[:3])] += 1
        drafted[0.6] += run.drafted if c < 300 else 0
    fixed = replace(base, decode=replace(decode, draft_confidence=0.0))
    for c in range(300):
        method = build_method("sd_draft", replace(fixed, seed=derive(7, "law", c)))
        drafted[0.0] += method(prompt).drafted
    assert 0 < drafted[0.6] < 0.9 * drafted[0.0]  # the cut-off ended some drafts
    law, prefixes = np.ones(1), [[]]
    with torch.inference_mode():
        for _ in range(3):
            nxt = warp(target(torch.tensor([prompt + p for p in prefixes])).logits[:, -1]).numpy()
            law = (law[:, None] * nxt).ravel()
            prefixes = [p + [t] for p in prefixes for t in range(vocab)]
    keep = law > 1e-12
    assert counts.ravel()[~keep].sum() == 0
    p = chisquare(counts.ravel()[keep], law[keep] / law[keep].sum() * counts.sum()).pvalue
    assert p > 1e-3, p


def test_forward_counter_counts_calls(setup):
    with ForwardCounter(setup.target) as fc:
        greedy_generate(setup.target, [1, 2, 3], 5)
    assert fc.calls == 1 + 5  # prefill + one forward per new token


def test_summary_ratios():
    rec = dict(prompt="p", draft_seconds=0.0, verify_seconds=0.0, draft_step_seconds=[], exact=True)
    records = [
        {**rec, "method": "greedy", "tokens": [1] * 10, "seconds": 1.0, "forwards": 10},
        {**rec, "method": "sd_x", "tokens": [1] * 10, "seconds": 0.5, "forwards": 4,
         "draft_seconds": 0.1, "verify_seconds": 0.3, "draft_step_seconds": [0.02, 0.03, 0.05]},
    ]  # fmt: skip
    s = summarize(records, unstable_spread=0.1).set_index("method")
    assert s.loc["sd_x", "speedup"] == pytest.approx(2.0)
    assert s.loc["sd_x", "accept_len"] == pytest.approx(2.5)
    assert s.loc["sd_x", "overhead_share"] == pytest.approx(0.2)
    assert s.loc["sd_x", "draft_ms_median"] == pytest.approx(30.0)


def test_bench_prompts_checks_size():
    class Tok:
        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            return [len(messages[0]["content"])]

    recs = [{"task_id": "t0", "prompt": "def f():"}, {"task_id": "t1", "prompt": "def g(x):"}]
    bench = {"name": "he", "prompts": "humaneval", "n": 2, "kind": "code"}
    assert bench_prompts(recs, bench, Tok()) == [("t0", [8]), ("t1", [9])]
    with pytest.raises(ValueError, match="wants 3"):
        bench_prompts(recs, {**bench, "n": 3}, Tok())
    assert bench_prompts(recs, {**bench, "n": 1, "skip": 1}, Tok()) == [("t1", [9])]
    with pytest.raises(ValueError, match="wants 2 prompts after the first 1"):
        bench_prompts(recs, {**bench, "skip": 1}, Tok())


def test_baseline_runs_first_and_last_and_its_spread_flags_a_busy_machine():
    from kvspec.decoding.bench import Run

    calls: list[str] = []
    budgets: list[int | None] = []

    def method(name):
        def run(prompt, max_new_tokens=None):
            calls.append(name)
            budgets.append(max_new_tokens)
            return Run([1] * 10, 1.0 + len(calls) / 100, 10)

        return run

    records = run_benchmark(
        {"greedy": method("greedy"), "x": method("x")}, [("a", [1]), ("b", [2])],
        baseline_repeats=2, warmup_tokens=3,
    )  # fmt: skip
    assert calls == ["greedy", "x"] + ["greedy", "x", "greedy"] * 2  # warm-up, then per prompt
    assert budgets == [3, 3] + [None] * 6  # a short warm-up; timed runs keep the full budget
    assert [r["method"] for r in records] == ["greedy", "x", "greedy", "x"]
    assert all(r["load1"] >= 0 for r in records)
    greedy = [r for r in records if r["method"] == "greedy"]
    assert [r["baseline_seconds"] for r in greedy] == [[1.03, 1.05], [1.06, 1.08]]
    # the baseline's time is the mean of its runs, not the slower one (an upper median of
    # two, which would overstate every speedup)
    assert [r["seconds"] for r in greedy] == pytest.approx([1.04, 1.07])
    calls.clear()
    run_benchmark({"greedy": method("greedy"), "x": method("x")}, [("a", [1])], warmup=False)
    assert calls == ["greedy", "x"]  # no warm-up: one run each


def test_the_warm_up_runs_on_second_instances_so_nothing_learnt_reaches_a_timed_run():
    """An adaptive drafter learns from every verdict; warmed up on the prompt it is then timed
    on, it would start that timed run knowing the answer's acceptance (seen 2026-11-30: Table
    4.7's sd_hybrid_target accepted 2.40 tokens a step so, 2.25 cold). `warmup_methods` take
    the warm-up; the timed instances start cold."""
    from kvspec.decoding.bench import Run

    def learner(log: list[str], tag: str):
        seen: list[int] = []  # what this instance has learnt from

        def run(prompt, max_new_tokens=None):
            log.append(tag)
            out = Run([1] * 4, 1.0, 4, accepted=len(seen))  # "accepts" more the more it saw
            seen.append(prompt[0])
            return out

        return run

    log: list[str] = []
    timed = {"greedy": learner(log, "timed"), "sd_x": learner(log, "timed")}
    fresh = {"sd_x": learner(log, "warm")}  # only the methods that learn get a second one
    records = run_benchmark(timed, [("a", [1]), ("b", [2])], warmup_methods=fresh)
    assert log[:2] == ["timed", "warm"] and set(log[2:]) == {"timed"}
    assert [r["accepted"] for r in records if r["method"] == "sd_x"] == [0, 1]  # cold at "a"
    records = run_benchmark({"sd_x": learner([], "timed")}, [("a", [1])])  # no second instance
    assert records[0]["accepted"] == 1  # it had learnt from its warm-up on "a"


def test_only_the_declared_learners_keep_state_between_calls(setup, prompts):
    """The methods warmed up on their timed instance (`MethodDecl.learns` false) run a prompt
    alike whatever they ran before: built as the rule builds them, a run of one prompt equals
    its run after another prompt, draft for draft."""
    assert METHODS["sd_hybrid_target"].learns and METHODS["llamacpp_greedy"].learns
    assert not METHODS["sd_suffix_decoding"].learns and not METHODS["sd_draft"].learns
    (_, first), (_, second) = prompts[:2]
    for name in (m for m in LOCAL if not METHODS[m].learns):
        fn = build_method(name, setup)
        before = fn(first)
        fn(second)
        after = fn(first)
        stats = ("tokens", "forwards", "steps", "drafted", "accepted")
        assert [getattr(before, k) for k in stats] == [getattr(after, k) for k in stats], name


def test_baseline_spread_and_unstable_flag():
    from kvspec.decoding.bench_summary import baseline_spread

    rec = dict(draft_seconds=0.0, verify_seconds=0.0, draft_step_seconds=[], exact=True, load1=0.5)
    records = [
        {**rec, "method": "greedy", "prompt": "a", "tokens": [1] * 10, "seconds": 1.0,
         "forwards": 10, "baseline_seconds": [1.0, 1.2]},
        {**rec, "method": "greedy", "prompt": "b", "tokens": [1] * 10, "seconds": 1.0,
         "forwards": 10, "baseline_seconds": [1.0, 1.2]},
        {**rec, "method": "sd_x", "prompt": "a", "tokens": [1] * 10, "seconds": 0.5,
         "forwards": 4, "load1": 3.0},
    ]  # fmt: skip
    rates = [20 / 2.0, 20 / 2.4]
    assert baseline_spread(records) == pytest.approx((rates[0] - rates[1]) / np.median(rates))
    s = summarize(records, unstable_spread=0.1)
    assert bool(s["baseline_unstable"].iloc[0]) and s["load1_max"].iloc[0] == 3.0
    assert not summarize(records, unstable_spread=0.5)["baseline_unstable"].iloc[0]
    one = [{**r, "baseline_seconds": [1.0]} if r["method"] == "greedy" else r for r in records]
    assert np.isnan(baseline_spread(one))


def test_prompt_sets_take_their_categories_in_turn() -> None:
    from kvspec.decoding.prompts import _by_category

    recs = [{"id": str(i), "prompt": f"p{i}", "category": c}
            for i, c in enumerate(["a", "a", "b", "c", "b"])]  # fmt: skip
    assert [i for i, _ in _by_category(recs, ["b", "a"])] == ["2", "0", "4", "1"]
    assert [i for i, _ in _by_category(recs, None)] == ["0", "2", "3", "1", "4"]
    with pytest.raises(ValueError, match="no prompt records of the categories"):
        _by_category(recs, ["z"])


def test_llama_cpp_methods_without_their_build_are_a_clear_error(setup) -> None:
    """The peer rows need llama.cpp's build and the GGUF file (tests/ngram/test_llamacpp_peer.py
    runs them for real)."""
    for name in ("llamacpp_greedy", "llamacpp_prompt_lookup"):
        with pytest.raises(ValueError, match="llama_cpp build directory"):
            build_method(name, setup)
