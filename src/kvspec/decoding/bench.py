"""Timed decoding runs: every method on the same prompts, batch size 1, side by side.

Methods are measured in one process, interleaved prompt by prompt (so a change in machine
load hits every method alike), after one discarded warm-up run of each (a short one: a few
new tokens warm the allocator, the kernels and the index's pages as well as a full answer,
run by a second instance of each method that learns between calls, so that what an adaptive
drafter learns while warming up stays out of its timed runs). Per run we record the wall
time, the number of target forward passes that produced tokens (via a forward hook, so Hugging
Face's own loops are counted the same way as ours), and for our loop the draft and verify
time of every step.
`kvspec.decoding.bench_summary` turns the records into tokens/s, accepted length, speedup over
plain greedy decoding and where the time goes.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

import torch
from tqdm import tqdm


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


class Method(Protocol):
    """One decoding method: a prompt's ids -> its timed Run. `max_new_tokens` overrides the
    method's token budget for one call (the benchmark's short warm-up)."""

    def __call__(self, prompt: list[int], max_new_tokens: int | None = None) -> Run: ...


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


def run_of_steps(tokens: list[int], steps: Sequence[Any], seconds: float) -> Run:
    """A Run of the study's speculative loop (chain or tree) from its steps."""
    return Run(
        tokens, seconds, len(steps),
        draft_seconds=sum(s.draft_seconds for s in steps),
        verify_seconds=sum(s.verify_seconds for s in steps),
        steps=len(steps),
        drafted=sum(s.drafted for s in steps),
        accepted=sum(s.accepted for s in steps),
        draft_step_seconds=[s.draft_seconds for s in steps],
    )  # fmt: skip


def run_benchmark(
    methods: Mapping[str, Method],
    prompts: Sequence[tuple[str, list[int]]],
    repeats: int = 1,
    baseline: str = "greedy",
    baseline_repeats: int = 1,
    warmup: bool = True,
    warmup_tokens: int | None = None,
    warmup_methods: Mapping[str, Method] | None = None,
) -> list[dict[str, Any]]:
    """Time every method on every (prompt id, prompt ids); one record per method and prompt.

    The first prompt is decoded once by every method first, untimed, to `warmup_tokens` new
    tokens (None: the methods' own budget; `warmup=False` skips it when an earlier call in
    the same process warmed every method up). `warmup_methods`, second instances of the
    methods that learn between calls (an adaptive drafter's acceptance and cost estimates),
    take the warm-up in their place, so that nothing learnt while warming up reaches a timed
    run of that same prompt; every other method warms up on its timed instance. Each
    timed record keeps the median-time run of `repeats`. The `baseline` method runs
    `baseline_repeats` times per prompt instead, first and then after all other methods,
    so its spread (`baseline_seconds`, one time per repeat) shows how much the machine's
    speed drifted while the others ran; its record's time is the mean of those runs (the
    time at the middle of the interval the other methods ran in; the upper median of two
    runs, used until 2026-11-28, took the slower one and so overstated every speedup). Each
    record also holds the 1-minute load average when it finished (`load1`).
    """
    if not prompts:
        raise ValueError("no benchmark prompts")
    warm = {**methods, **(warmup_methods or {})}
    for name in methods if warmup else ():
        warm[name](prompts[0][1], warmup_tokens)  # allocator, kernels, the index's pages
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
            record = _record(baseline, prompt_id, ids, _mean_time(base_runs))
            mine[baseline] = {**record, "baseline_seconds": [r.seconds for r in base_runs]}
        records += [mine[name] for name in methods]  # in the methods' order
    return records


def _median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]


def _mean_time(runs: list[Run]) -> Run:
    """The first run with the mean time of all (runs of one deterministic method)."""
    return replace(runs[0], seconds=statistics.fmean(r.seconds for r in runs))


def _record(name: str, prompt_id: str, ids: list[int], run: Run) -> dict[str, Any]:
    return {
        "method": name, "prompt": prompt_id, "prompt_len": len(ids), **asdict(run),
        "load1": os.getloadavg()[0],
    }  # fmt: skip
