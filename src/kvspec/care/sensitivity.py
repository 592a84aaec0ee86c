"""Rank plans for the sensitivity study of Figure 3.1.

(a, b) Halve one layer: every K/V matrix keeps its full width g_h·d_h except layer ℓ, whose K
and V latents are halved; sweeping ℓ shows how unevenly layers tolerate rank loss.
(c) Remove one singular-value group: the components of each matrix, ordered by singular value,
are split into `groups` contiguous groups; group g is removed from K and V of the last
`last_layers` layers (everything else at full rank), and the perplexity change is measured.
"""

from __future__ import annotations

from typing import Any


def _check(num_layers: int, max_rank: int) -> None:
    if num_layers < 1 or max_rank < 2:
        raise ValueError(f"need num_layers >= 1 and max_rank >= 2, got {num_layers}, {max_rank}")


def halve_layer_plan(num_layers: int, max_rank: int, layer: int) -> dict[str, Any]:
    """Full-rank plan except `layer`, whose K and V ranks are max_rank // 2."""
    _check(num_layers, max_rank)
    if not 0 <= layer < num_layers:
        raise ValueError(f"layer {layer} outside [0, {num_layers})")
    ranks = [max_rank // 2 if i == layer else max_rank for i in range(num_layers)]
    return {"ranks_k": ranks, "ranks_v": list(ranks), "kind": "halve", "layer": layer}


def sv_groups(width: int, groups: int) -> list[list[int]]:
    """Component indices 0..width-1 (descending singular value) in `groups` contiguous groups."""
    if not 1 <= groups <= width:
        raise ValueError(f"cannot split {width} components into {groups} groups")
    bounds = [round(g * width / groups) for g in range(groups + 1)]
    return [list(range(bounds[g], bounds[g + 1])) for g in range(groups)]


def drop_group_plan(
    num_layers: int, max_rank: int, group: int, groups: int, last_layers: int
) -> dict[str, Any]:
    """Full-rank plan with singular-value group `group` removed in the last `last_layers`."""
    _check(num_layers, max_rank)
    if not 0 <= group < groups:
        raise ValueError(f"group {group} outside [0, {groups})")
    if not 1 <= last_layers <= num_layers:
        raise ValueError(f"last_layers must lie in [1, {num_layers}], got {last_layers}")
    removed = sv_groups(max_rank, groups)[group]
    first = num_layers - last_layers
    drops = [removed if i >= first else [] for i in range(num_layers)]
    return {
        "ranks_k": [max_rank] * num_layers,
        "ranks_v": [max_rank] * num_layers,
        "drop_k": drops,
        "drop_v": [list(d) for d in drops],
        "kind": "svgroup",
        "group": group,
        "groups": groups,
        "layers": list(range(first, num_layers)),
    }
