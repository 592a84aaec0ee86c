"""Draft latency of infini-gram drafting, measured the way decoding calls it.

Three timings per context, on held-out target responses (never in the index):
- `decode`: the drafter is called at every position of a response in turn, as the decoding
  loop calls it (each call reuses the previous call's match);
- `lookup`: a fresh drafter per context (a cold longest-suffix search every time);
- `sequential`: k sequential `infgram_ntd` calls through the engine (the thesis's
  comparison for `inf_nkt`), on the first `sequential_contexts` contexts.
The drafter uses the decode configuration (`min_match`, `confidence`) and `max_support`
of the index, so the numbers are those of the benchmarked drafter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from kvspec.ngram.drafters import InfiniGramDrafter, sequential_infgram_draft


def percentiles(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/mean in milliseconds (NaN when empty)."""
    if not len(seconds):
        return {"p50_ms": float("nan"), "p90_ms": float("nan"), "p99_ms": float("nan"),
                "mean_ms": float("nan"), "n": 0}  # fmt: skip
    ms = 1e3 * np.asarray(seconds)
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "n": len(ms),
    }


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def draft_latency(
    make_drafter: Callable[[], InfiniGramDrafter],
    responses: Sequence[tuple[list[int], list[int]]],
    k: int,
    sequential_contexts: int,
) -> dict[str, Any]:
    """Timings of k-token drafts along (prompt ids, response ids) pairs (module docstring)."""
    decode: list[float] = []
    drafted: list[int] = []
    contexts: list[list[int]] = []
    for prompt, response in tqdm(responses, desc="draft latency", unit="response", mininterval=5):
        drafter = make_drafter()
        for i in range(len(response) + 1):
            ctx = prompt + response[:i]
            draft, seconds = _timed(lambda ctx=ctx, d=drafter: d.propose(ctx, k))
            decode.append(seconds)
            drafted.append(len(draft.tokens))
            contexts.append(ctx)
    lookup = [_timed(lambda c=c: make_drafter().propose(c, k))[1] for c in contexts[::4]]
    engine = make_drafter().engine
    sequential = [
        _timed(lambda c=c: sequential_infgram_draft(engine, c, k))[1]
        for c in contexts[:: max(1, len(contexts) // max(1, sequential_contexts))][
            :sequential_contexts
        ]
    ]
    return {
        "decode": percentiles(decode),
        "lookup": percentiles(lookup),
        "sequential": percentiles(sequential),
        "mean_drafted": float(np.mean(drafted)) if drafted else float("nan"),
        "contexts": len(contexts),
    }
