"""Timed decoding runs: every method on the same prompts, batch size 1, side by side.

Methods are measured in one process, interleaved prompt by prompt (so a change in machine
load hits every method alike), after one discarded warm-up run of each. Per run we record
the wall time, the number of target forward passes that produced tokens (via a forward
hook, so Hugging Face's own loops are counted the same way as ours), and for our loop the
draft and verify time of every step. Summaries give tokens/s, accepted length (tokens per
target forward), speedup over plain greedy decoding and where the time goes.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from kvspec.io import read_json
from kvspec.seeds import derive
from kvspec.spec.adaptive import AdaptiveDrafter, Calibration
from kvspec.spec.decode import greedy_generate, speculative_generate
from kvspec.spec.drafters import DraftModelDrafter, InfiniGramDrafter, PromptLookupDrafter
from kvspec.spec.local_tree import HybridTreeDrafter, LocalTreeSettings
from kvspec.spec.methods import GREEDY_ONLY, METHODS
from kvspec.spec.ngram_index import open_engine
from kvspec.spec.tree import ModelTreeDrafter, tree_generate


@dataclass
class Run:
    """One method on one prompt."""

    tokens: list[int]
    seconds: float
    forwards: int  # target forward passes that produced tokens
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_step_seconds: list[float] = field(default_factory=list)


@dataclass
class Setup:
    """Everything a method needs: models, indexes (opened engines by name) and settings."""

    target: torch.nn.Module
    stops: list[int]
    max_new_tokens: int
    k: int
    draft_k: int
    confidence: float = 0.0
    min_match: int = 0
    mode: str = "greedy"
    seed: int = 0
    draft: torch.nn.Module | None = None
    engines: Mapping[str, Any] = field(default_factory=dict)
    calibrations: Mapping[str, Any] = field(default_factory=dict)  # index name -> acceptance rows
    threshold: float = 0.2
    prior_weight: float = 0.1
    tree: Mapping[str, int] = field(default_factory=lambda: {"depth": 4, "topk": 4, "total": 16})
    local_tree: Mapping[str, Any] = field(default_factory=dict)  # LocalTreeSettings fields
    arctic_suffix: str | None = None  # build directory of Arctic Inference's suffix tree
    corpus: Sequence[tuple[list[int], list[int]]] = ()  # (prompt, response) ids it starts from

    @classmethod
    def from_decode(
        cls, target, stops: list[int], max_new_tokens: int, decode: Mapping[str, Any], **kw
    ) -> Setup:
        """A Setup from the config's `spec.decode` block (k, draft_k, confidence, min_match,
        adaptive.threshold, adaptive.prior_weight, tree, local_tree)."""
        keys = ("confidence", "min_match", *(k for k in ("tree", "local_tree") if k in decode))
        adaptive = decode.get("adaptive") or {}
        extra = {k: adaptive[k] for k in ("threshold", "prior_weight") if k in adaptive}
        return cls(target, stops, max_new_tokens, decode["k"], decode["draft_k"],
                   **{k: decode[k] for k in keys}, **extra, **kw)  # fmt: skip


def open_engines(indexes: Mapping[str, tuple[str, str]], max_support: int) -> dict[str, Any]:
    """name -> opened infini-gram engine, from (index directory, its build-stats JSON)."""
    engines = {}
    for name, (index_dir, stats_path) in indexes.items():
        stats = read_json(stats_path)
        engines[name] = open_engine(
            index_dir, stats["vocab_size"], stats["eos_token_id"], max_support
        )
    return engines


Method = Callable[[list[int]], Run]


class ForwardCounter:
    """Counts forward calls of a module while active (a pre-forward hook)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module, self.calls, self._handle = module, 0, None

    def __enter__(self) -> ForwardCounter:
        self.calls = 0
        self._handle = self.module.register_forward_pre_hook(self._count)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _count(self, *_: object) -> None:
        self.calls += 1


def build_method(name: str, setup: Setup) -> Method:
    """The callable that decodes one prompt with method `name` (see METHODS)."""
    if name == "greedy":
        return lambda p: _ours_greedy(setup, p)
    if name.startswith("hf_"):
        return _hf_method(name, setup)
    if name.startswith("sd_"):
        return _sd_method(name, setup)
    raise ValueError(f"unknown decoding method {name!r}; known: {METHODS}")


def _ours_greedy(setup: Setup, prompt: list[int]) -> Run:
    with ForwardCounter(setup.target) as fc:
        t0 = time.perf_counter()
        tokens = greedy_generate(setup.target, prompt, setup.max_new_tokens, setup.stops)
        seconds = time.perf_counter() - t0
    return Run(tokens, seconds, fc.calls - (len(prompt) > 1))  # prefill produces nothing


def _hf_method(name: str, setup: Setup) -> Method:
    extra: dict[str, Any] = {}
    if name == "hf_prompt_lookup":
        extra["prompt_lookup_num_tokens"] = setup.k
    elif name == "hf_assisted":
        if setup.draft is None:
            raise ValueError("hf_assisted needs a draft model")
        extra["assistant_model"] = setup.draft
    elif name != "hf_greedy":
        raise ValueError(f"unknown decoding method {name!r}; known: {METHODS}")

    @torch.inference_mode()
    def run(prompt: list[int]) -> Run:
        ids = torch.tensor([prompt], dtype=torch.long, device=setup.target.device)  # (1, P)
        with ForwardCounter(setup.target) as fc:
            t0 = time.perf_counter()
            out = setup.target.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=setup.max_new_tokens,
                do_sample=False,
                eos_token_id=setup.stops,
                pad_token_id=setup.stops[0],
                **extra,
            )
            seconds = time.perf_counter() - t0
        new = out[0, len(prompt) :].tolist()
        return Run(_until_stop(new, setup.stops), seconds, fc.calls)

    return run


def make_drafter(name: str, setup: Setup) -> tuple[Any, int]:
    """The drafter of speculative method `name` and its draft depth."""
    if name == "sd_draft":
        if setup.draft is None:
            raise ValueError("sd_draft needs a draft model")
        return DraftModelDrafter(setup.draft, sample=setup.mode == "sample"), setup.draft_k
    base = name.removesuffix("_adaptive")
    if base == "sd_prompt_lookup":
        lookup = PromptLookupDrafter()
        return (_adaptive({"local": lookup}, setup, None) if base != name else lookup), setup.k
    for prefix in ("sd_infgram_", "sd_hybrid_"):
        if base.startswith(prefix):
            index = base.removeprefix(prefix)
            break
    else:
        raise ValueError(f"unknown decoding method {name!r}; known: {METHODS}")
    ngram = _ngram_drafter(name, index, setup)
    if name == base and prefix == "sd_infgram_":
        return ngram, setup.k
    drafters = {"index": ngram} if prefix == "sd_infgram_" else {
        "local": PromptLookupDrafter(), "index": ngram,
    }  # fmt: skip
    return _adaptive(drafters, setup, setup.calibrations.get(index)), setup.k


def _ngram_drafter(name: str, index: str, setup: Setup) -> InfiniGramDrafter:
    """Greedy inf_nkt drafts from the opened index `index` (method `name` needs it)."""
    if index not in setup.engines:
        raise ValueError(f"{name} needs the {index!r} index; have {sorted(setup.engines)}")
    return InfiniGramDrafter(
        setup.engines[index], confidence=setup.confidence, min_match=setup.min_match,
        sample=False, seed=derive(setup.seed, "draft"),
    )  # fmt: skip


def _adaptive(drafters: dict[str, Any], setup: Setup, rows: Any) -> AdaptiveDrafter:
    """An adaptive drafter, its index prior from acceptance rows when the model has them."""
    prior = Calibration.from_rows(rows, "index", setup.prior_weight) if rows is not None else None
    return AdaptiveDrafter(drafters, prior, setup.threshold)


def _sd_method(name: str, setup: Setup) -> Method:
    if name in ("sd_draft_tree", "sd_suffix_decoding") or name.endswith("_tree"):
        return _tree_method(name, setup)
    drafter, k = make_drafter(name, setup)

    def run(prompt: list[int]) -> Run:
        t0 = time.perf_counter()
        tokens, steps = speculative_generate(
            setup.target, prompt, drafter, setup.max_new_tokens, k,
            mode=setup.mode, eos_token_id=setup.stops, seed=derive(setup.seed, "verify"),
        )  # fmt: skip
        return _sd_run(tokens, steps, time.perf_counter() - t0)

    return run


def _tree_method(name: str, setup: Setup) -> Method:
    """A tree drafter's method, its tree verified in one target forward per step."""
    if setup.mode != "greedy":
        raise ValueError(f"{name} verifies greedily only (no rejection-sampling tree)")
    drafter = _tree_drafter(name, setup)

    def run(prompt: list[int]) -> Run:
        t0 = time.perf_counter()
        tokens, steps = tree_generate(
            setup.target, prompt, drafter, setup.max_new_tokens, setup.stops
        )
        return _sd_run(tokens, steps, time.perf_counter() - t0)

    return run


def _tree_drafter(name: str, setup: Setup) -> Any:
    """sd_draft_tree: EAGLE-2's dynamic tree from the draft model; sd_hybrid_*_tree: the
    request-local trie plus the index's chain; sd_suffix_decoding: Arctic Inference's suffix
    trees over the target-response corpus and the request."""
    if name.startswith("sd_hybrid_"):
        return _hybrid_tree(name, setup)
    if name == "sd_draft_tree":
        if setup.draft is None:
            raise ValueError("sd_draft_tree needs a draft model")
        tree = setup.tree
        return ModelTreeDrafter(setup.draft, tree["depth"], tree["topk"], tree["total"])
    if setup.arctic_suffix is None:
        raise ValueError("sd_suffix_decoding needs the arctic_suffix build directory")
    from kvspec.spec.suffix_peer import ArcticSuffixDrafter

    return ArcticSuffixDrafter(setup.arctic_suffix, setup.corpus, setup.k)


def _hybrid_tree(name: str, setup: Setup) -> HybridTreeDrafter:
    index = name.removeprefix("sd_hybrid_").removesuffix("_tree")
    return HybridTreeDrafter(
        _ngram_drafter(name, index, setup), LocalTreeSettings.from_config(setup.local_tree)
    )


def _sd_run(tokens: list[int], steps: Sequence[Any], seconds: float) -> Run:
    """A Run of our speculative loop from its steps."""
    return Run(
        tokens, seconds, len(steps),
        draft_seconds=sum(s.draft_seconds for s in steps),
        verify_seconds=sum(s.verify_seconds for s in steps),
        steps=len(steps),
        drafted=sum(s.drafted for s in steps),
        accepted=sum(s.accepted for s in steps),
        draft_step_seconds=[s.draft_seconds for s in steps],
    )  # fmt: skip


def _until_stop(tokens: list[int], stops: Sequence[int]) -> list[int]:
    for i, t in enumerate(tokens):
        if t in stops:
            return tokens[: i + 1]
    return tokens


def run_benchmark(
    methods: Mapping[str, Method],
    prompts: Sequence[tuple[str, list[int]]],
    repeats: int = 1,
    baseline: str = "greedy",
    baseline_repeats: int = 1,
    warmup: bool = True,
) -> list[dict[str, Any]]:
    """Time every method on every (prompt id, prompt ids); one record per method and prompt.

    The first prompt is decoded once by every method first, untimed (warm-up; `warmup=False`
    skips it when an earlier call in the same process warmed every method up). Each
    timed record keeps the median-time run of `repeats`. The `baseline` method runs
    `baseline_repeats` times per prompt instead, first and then after all other methods,
    so its spread (`baseline_seconds`, one time per repeat) shows how much the machine's
    speed drifted while the others ran; its record keeps the median of those runs. Each
    record also holds the 1-minute load average when it finished (`load1`).
    """
    if not prompts:
        raise ValueError("no benchmark prompts")
    for fn in methods.values() if warmup else ():
        fn(prompts[0][1])  # warm-up: allocator, kernels, page cache of the index
    records = []
    for prompt_id, ids in tqdm(prompts, desc="benchmark", unit="prompt", mininterval=5):
        base_runs = [methods[baseline](ids)] if baseline in methods else []
        mine = {}
        for name, fn in methods.items():
            if name != baseline:
                mine[name] = _record(
                    name, prompt_id, ids, _median_run([fn(ids) for _ in range(repeats)])
                )
        if base_runs:
            base_runs += [methods[baseline](ids) for _ in range(baseline_repeats - 1)]
            record = _record(baseline, prompt_id, ids, _median_run(base_runs))
            mine[baseline] = {**record, "baseline_seconds": [r.seconds for r in base_runs]}
        records += [mine[name] for name in methods]  # in the methods' order
    return records


def _median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]


def _record(name: str, prompt_id: str, ids: list[int], run: Run) -> dict[str, Any]:
    return {
        "method": name, "prompt": prompt_id, "prompt_len": len(ids), **asdict(run),
        "load1": os.getloadavg()[0],
    }  # fmt: skip


def baseline_spread(records: Sequence[Mapping[str, Any]], baseline: str = "greedy") -> float:
    """(max - min) / median of the baseline's tokens/s over its interleaved repeats.

    Repeat r's tokens/s is all its prompts' tokens over the sum of their repeat-r times;
    NaN with fewer than two repeats.
    """
    rows = [r for r in records if r["method"] == baseline and r.get("baseline_seconds")]
    n = min((len(r["baseline_seconds"]) for r in rows), default=0)
    if n < 2:
        return float("nan")
    tokens = sum(len(r["tokens"]) for r in rows)
    rates = [tokens / sum(r["baseline_seconds"][i] for r in rows) for i in range(n)]
    return (max(rates) - min(rates)) / statistics.median(rates)


def divergence(
    target: torch.nn.Module, prompt: list[int], reference: list[int], tokens: list[int]
) -> dict[str, Any]:
    """Where `tokens` first differs from the greedy `reference`, and the target's top-2 logit
    margin there (a near-tie means float rounding, not a decoding bug, decided it)."""
    n = min(len(reference), len(tokens))
    first = next((i for i in range(n) if reference[i] != tokens[i]), None)
    if first is None and len(reference) == len(tokens):
        return {"exact": True, "first_divergence": None, "tie_margin": None}
    first = n if first is None else first
    with torch.inference_mode():
        ids = torch.tensor([prompt + reference[:first]], dtype=torch.long, device=target.device)
        logits = target(input_ids=ids).logits[0, -1].double()  # (V,)
    top2 = torch.topk(logits, 2).values
    return {"exact": False, "first_divergence": first, "tie_margin": float(top2[0] - top2[1])}


def _share(flags: pd.Series) -> float:
    """Share of True among the non-missing flags (NaN when none)."""
    known = flags.dropna()
    return float(known.astype(float).mean()) if len(known) else float("nan")


def summarize(
    records: Sequence[Mapping[str, Any]], baseline: str = "greedy", unstable_spread: float = 0.1
) -> pd.DataFrame:
    """Per method: tokens/s, accepted length, speedup over `baseline`, time split, exactness,
    draft ms per step (median and p90); per set: the baseline's spread over its repeats,
    `baseline_unstable` when that exceeds `unstable_spread`, and the highest load average."""
    df = pd.DataFrame(records)
    rows = []
    for name, g in df.groupby("method", sort=False):
        tokens = int(g["tokens"].map(len).sum())
        seconds = float(g["seconds"].sum())
        draft, verify = float(g["draft_seconds"].sum()), float(g["verify_seconds"].sum())
        step_times = [t for ts in g["draft_step_seconds"] for t in ts]
        rows.append(
            {
                "method": name,
                "prompts": len(g),
                "tokens": tokens,
                "seconds": seconds,
                "tok_s": tokens / seconds if seconds else float("nan"),
                "accept_len": tokens / g["forwards"].sum() if g["forwards"].sum() else float("nan"),
                "draft_share": draft / seconds if seconds else float("nan"),
                "verify_share": verify / seconds if seconds else float("nan"),
                "overhead_share": (seconds - draft - verify) / seconds
                if draft + verify
                else float("nan"),
                "draft_ms_median": 1e3 * statistics.median(step_times)
                if step_times
                else float("nan"),
                "draft_ms_p90": 1e3 * float(np.percentile(step_times, 90))
                if step_times
                else float("nan"),
                "exact_vs_greedy": _share(g["exact"]) if "exact" in g else float("nan"),
            }
        )
    out = pd.DataFrame(rows)
    base = out.loc[out["method"] == baseline, "tok_s"]
    out["speedup"] = out["tok_s"] / float(base.iloc[0]) if len(base) else float("nan")
    out["baseline_spread"] = baseline_spread(records, baseline)
    out["baseline_unstable"] = bool(out["baseline_spread"].iloc[0] > unstable_spread)
    out["load1_max"] = float(df["load1"].max()) if "load1" in df else float("nan")
    return out


def bench_prompts(
    records: Sequence[Mapping[str, Any]], bench: Mapping[str, Any], tokenizer: Any
) -> list[tuple[str, list[int]]]:
    """The first `bench['n']` prompts of a benchmark set as (id, chat-formatted ids).

    `bench['kind']` is "heldout" (prompt records of that split), "code" (HumanEval: the
    function stub is the user turn), "math" (the problem is the user turn) or "prompt"
    (e.g. Spec-Bench: records of `bench['categories']`, taken in turn from each category).
    """
    from kvspec.spec.generate import prompt_ids

    kind, src = bench["kind"], bench["prompts"]
    if kind == "heldout":
        texts = [(r["id"], r["prompt"]) for r in records if r["split"] == src]
    elif kind == "code":
        texts = [(r["task_id"], r["prompt"]) for r in records]
    elif kind == "math":
        texts = [(r["id"], r["problem"]) for r in records]
    elif kind == "prompt":
        texts = _by_category(records, bench.get("categories"))
    else:
        raise ValueError(f"benchmark {bench['name']!r}: unsupported prompt kind {kind!r}")
    if len(texts) < bench["n"]:
        raise ValueError(
            f"benchmark {bench['name']!r} wants {bench['n']} prompts, {src!r} has {len(texts)}"
        )
    return [(pid, prompt_ids(tokenizer, text)) for pid, text in texts[: bench["n"]]]


def _by_category(
    records: Sequence[Mapping[str, Any]], categories: Sequence[str] | None
) -> list[tuple[str, str]]:
    """(id, prompt) of the records of `categories` (all when None), round-robin over them."""
    cats = list(categories) if categories else list(dict.fromkeys(r["category"] for r in records))
    queues = [[(r["id"], r["prompt"]) for r in records if r["category"] == c] for c in cats]
    missing = [c for c, q in zip(cats, queues, strict=True) if not q]
    if missing:
        raise ValueError(f"no prompt records of the categories {missing}")
    return [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]


def benchmark_methods(
    setup: Setup, names: Sequence[str], modes: Sequence[str]
) -> dict[str, Method]:
    """Every listed method; speculative ones once per verification mode ("sd_x@sample")."""
    methods = {}
    for mode in modes:
        mode_setup = Setup(**{**setup.__dict__, "mode": mode})
        for name in names:
            if mode == "greedy":
                methods[name] = build_method(name, mode_setup)
            elif name.startswith("sd_") and name not in GREEDY_ONLY:
                methods[f"{name}@{mode}"] = build_method(name, mode_setup)
    return methods


def mark_divergence(
    target: torch.nn.Module,
    records: list[dict[str, Any]],
    prompts: Sequence[tuple[str, list[int]]],
) -> None:
    """Add `exact`, `first_divergence`, `tie_margin` to greedy-mode records (vs "greedy")."""
    ids = dict(prompts)
    reference = {r["prompt"]: r["tokens"] for r in records if r["method"] == "greedy"}
    for r in records:
        if "@" in r["method"]:
            r.update(exact=None, first_divergence=None, tie_margin=None)
            continue
        r.update(divergence(target, ids[r["prompt"]], reference[r["prompt"]], r["tokens"]))
