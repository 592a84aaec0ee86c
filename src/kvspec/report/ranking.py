"""Methods ranked against a reference on prompts Table 4.7 does not time (`spec.ranking`,
beyond the documents; `kvspec.ngram.loop_cli` prints the same rows): per set and pooled over
the sets, each method's speed over greedy and over the reference, paired over the prompts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.report.stats import paired_runs_ratio
from kvspec.report.tables import write_table

Records = Sequence[Mapping[str, Any]]
GREEDY = "greedy"


def ranking_rows(records: Records, name: str, reference: str) -> list[dict[str, Any]]:
    """One row per method of one set's speed records (or several sets', each record's `set`
    naming its own): prompts, speed over greedy, tokens per target forward, speed ÷
    `reference` with its paired standard error, and how many runs equal greedy decoding."""
    by = _by_method(records)
    for method, runs in by.items():
        if set(runs) != set(by[GREEDY]):
            raise ValueError(f"{method} was not timed on the prompts greedy was")
    rows = []
    for method, runs in by.items():
        if method == GREEDY:
            continue
        speed, _, n = paired_runs_ratio(runs, by[GREEDY])
        ratio, se, _ = paired_runs_ratio(runs, by[reference]) if method != reference else (
            1.0, 0.0, n)  # fmt: skip
        exact = sum(bool(r.get("exact", True)) for r in runs.values())
        rows.append({
            "set": name, "method": method, "prompts": n, "x_greedy": speed,
            "tokens_per_forward": sum(len(r["tokens"]) for r in runs.values())
            / sum(r["forwards"] for r in runs.values()),
            f"vs_{reference}": ratio, f"vs_{reference}_se": se,
            "equal_to_greedy": f"{exact} of {len(runs)}",
            "widest_tie_where_not": max((r["tie_margin"] for r in runs.values()
                                         if not r.get("exact", True)), default=None),
        })  # fmt: skip
    return rows


def ranking_table(sets: Mapping[str, Records], reference: str) -> pd.DataFrame:
    """`ranking_rows` of each named set, then of all of them pooled (when more than one)."""
    rows = [row for name, recs in sets.items() for row in ranking_rows(recs, name, reference)]
    if len(sets) > 1:
        pooled = [{**r, "set": name} for name, recs in sets.items() for r in recs]
        rows += ranking_rows(pooled, "pooled", reference)
    return pd.DataFrame(rows)


def _by_method(records: Records) -> dict[str, dict[str, Mapping[str, Any]]]:
    """method -> prompt (its set's name before it when the records carry one) -> record."""
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in records:
        key = f"{r['set']}/{r['prompt']}" if "set" in r else r["prompt"]
        out.setdefault(r["method"], {})[key] = r
    return out


def notes(reference: str, note: str | None) -> list[str]:
    return [
        "x_greedy: the method's tokens/s over greedy decoding's, paired per prompt (greedy "
        "runs first and last on every prompt; `kvspec.report.stats.paired_runs_ratio`).",
        f"vs_{reference}: the same ratio against {reference}, with its paired standard error "
        "over the prompts (_se); pooled: every set's prompts together.",
        "The sets take no prompt Table 4.7 times (the config check refuses one that does)."
        + (f" {note}" if note else ""),
        "equal_to_greedy: runs whose tokens equal greedy decoding's; widest_tie_where_not: "
        "the widest top-2 logit margin where they first differ (a float near-tie).",
        "No paper column: the thesis times its methods on Table 4.7's sets only.",
    ]


def render(item: dict, inputs: dict[str, list[str]], outputs: dict[str, str]) -> None:
    sets = {label: read_json(path)["records"]
            for label, path in zip(item["sets"].values(), inputs["runs"], strict=True)}  # fmt: skip
    title = f"Methods ranked against {item['reference']} on prompts Table 4.7 does not time"
    write_table(ranking_table(sets, item["reference"]), outputs["csv"], outputs["md"], title,
                notes(item["reference"], item.get("note")))  # fmt: skip
