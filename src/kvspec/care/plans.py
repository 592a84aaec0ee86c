"""Rank-plan stages (CARE Algorithm 2 and Figure 3.1's plans) as functions of files.

Kept apart from `pipeline` so these small jobs import torch only, not transformers.
"""

from __future__ import annotations

from typing import Any

from kvspec.care.allocate import rank_limits, retained_energy, uniform_ranks, waterfill_ranks
from kvspec.care.sensitivity import drop_group_plan, halve_layer_plan
from kvspec.care.store import load_factors, plan_record, spectra
from kvspec.io import write_json
from kvspec.provenance import provenance

ALLOCATIONS = ("uniform", "waterfill")


def allocate_stage(
    factors_path: str, allocation: str, rank: int, out: str, bounds: list[float] | None = None
) -> None:
    """Per-matrix ranks with average `rank` (budget 2·L·rank), uniform or water-filled; with
    `bounds` (lo, hi) water-filled ranks stay within [lo·rank, hi·rank] (the released CARE
    code's dynamic ranks: [0.5, 2.0]; None: [1, g_h·d_h], the thesis's Algorithm 2)."""
    if allocation not in ALLOCATIONS:
        raise ValueError(f"allocation must be one of {ALLOCATIONS}, got {allocation!r}")
    factors = load_factors(factors_path)
    limit = factors[0].b.shape[1]  # g_h·d_h, the K/V output width
    if not 1 <= rank <= limit:
        raise ValueError(f"rank {rank} outside [1, {limit}] (g_h·d_h of this model)")
    spec = spectra(factors)
    low, high = rank_limits(rank, limit, bounds)
    if allocation == "uniform":
        ranks = uniform_ranks(len(factors), rank)
    else:
        ranks = waterfill_ranks(spec, len(factors) * rank, high, min_rank=low)
    record = plan_record(
        ranks,
        kind=allocation,
        rank=rank,
        max_rank=limit,
        budget=len(factors) * rank,
        retained_energy=retained_energy(spec, ranks),
        bounds=list(bounds) if bounds and allocation != "uniform" else None,
        total_energy=retained_energy(spec, [limit] * len(factors)),
        provenance=provenance({"allocation": allocation, "rank": rank}),
    )
    write_json(out, record)


def sensitivity_stage(factors_path: str, plan: str, opts: dict[str, Any], out: str) -> None:
    """Figure 3.1 plan `halve-l<layer>` or `svgroup-g<group>` (opts: groups, last_layers)."""
    factors = load_factors(factors_path)
    layers, limit = len(factors) // 2, factors[0].b.shape[1]
    kind, _, index = plan.partition("-")
    if kind == "halve":
        record = halve_layer_plan(layers, limit, int(index.removeprefix("l")))
    elif kind == "svgroup":
        g = int(index.removeprefix("g"))
        record = drop_group_plan(layers, limit, g, opts["groups"], opts["last_layers"])
    else:
        raise ValueError(f"unknown sensitivity plan {plan!r} (halve-l<i> or svgroup-g<i>)")
    write_json(out, {**record, "provenance": provenance(opts)})
