"""CARE report items (thesis ch. 3): Tables 3.1, 3.2, 3.4, 3.5 and Figures 3.1, 3.3, 3.4.

Each item reads evaluation records (``results/evaluate/...json``, written by
`kvspec.care.pipeline.evaluate_stage`) or rank plans, lays our numbers beside the thesis's
(columns marked "(paper)"), and writes CSV + Markdown (tables) or PNG + PDF + CSV (figures).
Our rows and the paper's are matched on method and KV-cache saving (1 − r / g_h·d_h), because
the stand-in models have a smaller g_h·d_h than the thesis's (1024) but the same fractions.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from kvspec.io import read_json
from kvspec.report.figures import plt, save_figure  # figures selects the headless backend
from kvspec.report.stats import (
    PPL_METRICS,
    add_stderr,
    display_with_stderr,
    documents_to_resolve,
    paired_difference,
    stderr_row,
)
from kvspec.report.tables import read_paper_table, side_by_side, write_table

# g_h·d_h of both thesis models (Llama-3.1-8B and Qwen3-4B: 8 KV heads x 128), thesis 3.2.1
PAPER_KV_WIDTH = 1024
METHOD_LABELS = {
    "svd-uniform": "SVD",
    "asvd-uniform": "ASVD",
    "care-waterfill": "CARE-E",
    "care-uniform": "CARE-U",
    "svd-waterfill": "SVD-E",
    "asvd-waterfill": "ASVD-E",
}
STRATEGY_LABELS = {"uniform": "CARE-U", "waterfill": "CARE-E"}
CALIB_LABELS = {"alpaca": "ALPACA", "c4": "C4", "wikitext2": "WikiText2", "ptb": "PTB"}
TASK_NAMES = {
    "wiki": "WikiText-2 word perplexity",
    "arc": "ARC-Challenge",
    "are": "ARC-Easy",
    "hs": "HellaSwag",
    "piqa": "PIQA",
    "mmlu": "MMLU",
    "obqa": "OpenBookQA",
    "ra": "RACE",
    "wg": "WinoGrande",
}


def _save_pct(value: float) -> str:
    return f"{value:.2f}"


def metric_row(
    record: dict[str, Any], ppl_column: str = "wiki_ppl", columns: list[str] | None = None
) -> dict[str, float]:
    """Our measured `columns` (default all) of one evaluation: accuracies in %, perplexity as
    is, and avg over the accuracies."""
    row: dict[str, float] = {}
    for col, m in record["metrics"].items():
        if columns is not None and col not in columns:
            continue
        is_ppl = m["metric"] in PPL_METRICS
        row[ppl_column if col == "wiki" else col] = m["value"] if is_ppl else 100 * m["value"]
    accs = [v for k, v in row.items() if k != ppl_column]
    row["avg"] = float(np.mean(accs)) if accs else float("nan")
    return row


def _paper_numeric(paper: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    out = paper.copy()
    for col in columns:
        out[col] = pd.to_numeric(out[col], errors="coerce")
    return out


def eval_notes(records: list[dict[str, Any]], paper_cols: list[str], meta: dict) -> list[str]:
    """Provenance and caveats: documents per column, columns not evaluated, averaging."""
    seen: dict[str, dict[str, Any]] = {}
    sizes: dict[str, Counter[int]] = {}
    shown = {"wiki" if c in ("wiki_ppl", "ppl") else c for c in paper_cols}
    for rec in records:
        for col, m in rec["metrics"].items():
            if col in shown:
                seen.setdefault(col, m)
                sizes.setdefault(col, Counter())[m["n"]] += 1
    per_col = ", ".join(f"{c}: {m['task']} {_sizes(sizes[c])}" for c, m in seen.items())
    missing = [c for c in paper_cols if c not in seen and c not in ("wiki_ppl", "ppl", "avg")]
    missing = [c for c in missing if not (c in ("wiki_ppl", "ppl") and "wiki" in seen)]
    dtypes = sorted({rec["dtype"] for rec in records if rec.get("dtype")})  # older records: none
    weights = f" with {' and '.join(dtypes)} weights" if dtypes else ""
    notes = [
        f"Source of (paper) columns: {meta['source'][0]}; {meta['table'][0]}",
        f"Ours: model `{records[0]['model']}`, lm-eval zero-shot{weights}; documents per column: "
        f"{per_col}",
        "Accuracies in %; avg (ours) = mean of our accuracy columns in this table; avg (paper) "
        "is the thesis's printed AVG.",
        "Rows are matched on KV saving (1 - r/(g_h·d_h)); rank (ours) is the stand-in model's "
        f"rank, rank (paper) the thesis's (g_h·d_h = {PAPER_KV_WIDTH}).",
    ]
    if missing:
        names = ", ".join(TASK_NAMES.get(c, c) for c in missing)
        notes.append(
            f"Not evaluated at this scale: {names} (not in the config's evaluated columns; "
            "the offline mirror has no HellaSwag or RACE data)."
        )
    return notes + [f"Paper transcription: {n}" for n in meta.get("notes", [])]


def _sizes(counts: Counter[int]) -> str:
    """`n=80`, or `n=1460 (4 rows), n=80 (9 rows)` when rows were scored on different sizes."""
    if len(counts) == 1:
        return f"n={next(iter(counts))}"
    parts = (f"n={n} ({k} row{'s' * (k > 1)})" for n, k in sorted(counts.items(), reverse=True))
    return ", ".join(parts)


def _records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [read_json(r["file"]) for r in rows]


def main_table(item: dict, paper_csv: str, outputs: dict[str, str]) -> pd.DataFrame:
    """Table 3.1 / 3.2: methods x ranks + the original GQA model, all tasks."""
    paper, meta = read_paper_table(paper_csv)
    ppl_col = "wiki_ppl" if "wiki_ppl" in paper.columns else "ppl"
    metrics = [c for c in paper.columns if c not in ("rank", "kv_save_pct", "method")]
    records = _records(item["rows"])
    ours, errors = [], []
    for row, rec in zip(item["rows"], records, strict=True):
        original = row["rank"] is None
        key = {
            "method": "GQA (Original)" if original else METHOD_LABELS[row["label"]],
            "kv_save_pct": _save_pct(0.0 if original else rec["kv_save_pct"]),
        }
        ours.append({**key, "rank": row["rank"], **metric_row(rec, ppl_col)})
        errors.append({**key, **stderr_row(rec, ppl_col)})
    ours_df = pd.DataFrame(ours).reindex(columns=["method", "kv_save_pct", "rank", *metrics])
    paper = _paper_numeric(paper, ["rank", *metrics])
    paper.loc[paper["method"] == "GQA (Original)", "kv_save_pct"] = _save_pct(0.0)
    paper.loc[paper["method"] == "GQA (Original)", "rank"] = np.nan
    df = side_by_side(ours_df, paper, ["method", "kv_save_pct"], ["rank", *metrics])
    df = _ordered(df, "method", list(METHOD_LABELS.values()))
    df = add_stderr(df, pd.DataFrame(errors), ["method", "kv_save_pct"])
    notes = eval_notes(records, metrics, meta) + [
        "The thesis prints the GQA baseline inside its first rank group; here it is the KV "
        "save 0.00 row (no compression).",
        "Ours: value ± lm-eval's standard error (CSV: the `stderr (ours)` columns); avg's "
        "error treats the tasks as independent.",
    ]
    shown = display_with_stderr(df)
    write_table(df, outputs["csv"], outputs["md"], meta["table"][0], notes, shown=shown)
    if "paired_csv" in outputs:
        paired_table(item["rows"], records, outputs, meta["table"][0])
    return df


COMPARED = ("care-waterfill", [("svd-uniform", "SVD"), ("asvd-uniform", "ASVD")])
RESOLVE = 3  # accuracy points a paired comparison should resolve (the thesis's gaps: 1-10)


def paired_table(
    rows: list[dict], records: list[dict], outputs: dict[str, str], title: str
) -> pd.DataFrame:
    """CARE-E minus SVD and minus ASVD at each rank: accuracy differences (points) over the
    same documents, with paired standard errors, and the perplexity ratio."""
    by_key = {(r["label"], r["rank"]): rec for r, rec in zip(rows, records, strict=True)}
    ours, others = COMPARED
    out = []
    for rank in sorted({r["rank"] for r in rows if r["label"] == ours}):
        care = by_key[(ours, rank)]
        for label, name in others:
            if (label, rank) not in by_key:
                continue
            other = by_key[(label, rank)]
            diff = paired_difference(care, other)
            row = {"rank": rank, "comparison": f"CARE-E − {name}"}
            row |= {f"{c} diff": f"{m:+.2f} ± {se:.2f}" for c, (m, se, _) in diff.items()}
            mean, se, _ = diff.get("avg", (math.nan, math.nan, 0))
            row["avg diff / se"] = mean / se if se else math.nan
            row["wiki ppl ratio"] = _ppl(care) / _ppl(other)
            row["documents"] = ", ".join(f"{c} {n}" for c, (_, _, n) in diff.items() if c != "avg")
            row[f"docs to resolve {RESOLVE} pts"] = _needed(diff)
            out.append(row)
    df = pd.DataFrame(out)
    notes = [
        "Differences in accuracy points, CARE-E minus the other method, over the documents "
        "both were scored on; ± is the paired standard error (std of per-document "
        "differences / sqrt(n)); avg averages the task differences (independent tasks).",
        "avg diff / se > 2: CARE-E ahead beyond two standard errors; < -2: behind.",
        "wiki ppl ratio < 1: CARE-E has the lower WikiText-2 word perplexity (no error given).",
        "documents: per task, the documents both models were scored on.",
        f"docs to resolve {RESOLVE} pts: per task, the documents at which this paired standard "
        f"error (falling as 1/sqrt(n)) would be {RESOLVE / 2:g} points, so that a {RESOLVE}-point "
        "difference lies two errors from zero (- : identical answers, nothing to extrapolate); "
        "the eval.tasks limits to set for a rerun that can decide.",
    ]
    heading = f"{title.split(' - ')[0]}: CARE-E vs SVD and ASVD, paired differences"
    write_table(df, outputs["paired_csv"], outputs["paired_md"], heading, notes)
    return df


def _needed(diff: dict[str, tuple[float, float, int]]) -> str:
    """`task n` per task: the documents `documents_to_resolve` asks for, from this SE."""
    needed = {c: documents_to_resolve(se, n, RESOLVE) for c, (_, se, n) in diff.items()}
    return ", ".join(f"{c} {v if v else '-'}" for c, v in needed.items() if c != "avg")


def _ppl(record: dict) -> float:
    m = record["metrics"].get("wiki")
    return m["value"] if m else math.nan


def _ordered(df: pd.DataFrame, key: str, order: list[str]) -> pd.DataFrame:
    """Rows as the thesis prints them: baseline first, then by KV saving (highest first), then
    by method in `order` (outer merges sort keys alphabetically)."""
    rank = {name: i for i, name in enumerate(order)}
    sort = pd.DataFrame(
        {
            "base": (df[key] != "GQA (Original)").astype(int),
            "save": -pd.to_numeric(df["kv_save_pct"], errors="coerce"),
            "method": df[key].map(lambda m: rank.get(m, len(rank))),
        }
    )
    return df.loc[sort.sort_values(["base", "save", "method"], kind="stable").index].reset_index(
        drop=True
    )


def _paper_with_save(paper: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    paper = _paper_numeric(paper, ["rank", *metrics])
    paper["kv_save_pct"] = [_save_pct(100 * (1 - r / PAPER_KV_WIDTH)) for r in paper["rank"]]
    return paper


def _ablation_table(
    item: dict, paper_csv: str, outputs: dict[str, str], key: str, labels: Callable[[str], str]
) -> pd.DataFrame:
    """Tables 3.4 / 3.5: one labelled CARE variant per row, a few columns."""
    paper, meta = read_paper_table(paper_csv)
    metrics = _with_our_columns([c for c in paper.columns if c not in ("rank", key)], item)
    for col in set(metrics) - set(paper.columns):  # our columns the thesis does not print
        paper[col] = ""
    records = _records(item["rows"])
    ours = [
        {
            key: labels(row["label"]),
            "kv_save_pct": _save_pct(rec["kv_save_pct"]),
            "rank": row["rank"],
            **metric_row(rec, columns=item["columns"]),
        }
        for row, rec in zip(item["rows"], records, strict=True)
    ]
    errors = [
        {k: o[k] for k in (key, "kv_save_pct")} | stderr_row(rec, columns=item["columns"])
        for o, rec in zip(ours, records, strict=True)
    ]
    ours_df = pd.DataFrame(ours).reindex(columns=[key, "kv_save_pct", "rank", *metrics])
    paper = _paper_with_save(paper, metrics)
    df = side_by_side(ours_df, paper, [key, "kv_save_pct"], ["rank", *metrics])
    df = _ordered(df, key, [*CALIB_LABELS.values(), *STRATEGY_LABELS.values()])
    df = add_stderr(df, pd.DataFrame(errors), [key, "kv_save_pct"])
    notes = eval_notes(records, metrics, meta) + ["Ours: value ± lm-eval's standard error."]
    shown = display_with_stderr(df)
    write_table(df, outputs["csv"], outputs["md"], meta["table"][0], notes, shown=shown)
    return df


def _with_our_columns(metrics: list[str], item: dict) -> list[str]:
    """The paper's columns, then ours it lacks (e.g. ARC-Easy standing in for chance-level
    tasks at a small scale), then avg."""
    ours = ["wiki_ppl" if c == "wiki" else c for c in item["columns"]]
    head = [m for m in metrics if m != "avg"]
    return [*head, *[c for c in ours if c not in head], "avg"]


def table_3_4(item: dict, paper_csv: str, outputs: dict[str, str]) -> pd.DataFrame:
    """Calibration corpus ablation (CARE-E)."""
    return _ablation_table(
        item, paper_csv, outputs, "calibration", lambda s: CALIB_LABELS.get(s, s)
    )


def table_3_5(item: dict, paper_csv: str, outputs: dict[str, str]) -> pd.DataFrame:
    """Uniform (CARE-U) vs water-filling (CARE-E)."""
    return _ablation_table(item, paper_csv, outputs, "strategy", STRATEGY_LABELS.__getitem__)


def figure_3_3(item: dict, outputs: dict[str, str]) -> pd.DataFrame:
    """Water-filled ranks per layer for W_K and W_V, one line per calibration corpus."""
    rows = []
    for row in item["rows"]:
        plan = read_json(row["file"])
        for matrix in ("k", "v"):
            for layer, r in enumerate(plan[f"ranks_{matrix}"]):
                rows.append(
                    {
                        "calibration": row["label"],
                        "rank": row["rank"],
                        "layer": layer,
                        "matrix": f"W_{matrix.upper()}",
                        "allocated": r,
                    }
                )
    df = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, matrix in zip(axes, ("W_K", "W_V"), strict=True):
        for (label, rank), part in df[df["matrix"] == matrix].groupby(["calibration", "rank"]):
            ax.plot(
                part["layer"], part["allocated"], marker="o", ms=3, label=f"{label} (avg r={rank})"
            )
        ax.set_title(f"{matrix} ({item['model']})")
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("allocated rank (CARE-E)")
    axes[1].legend(fontsize=8)
    return _save_with_integer_x(fig, axes, df, outputs)


def _save_with_integer_x(fig, axes, df: pd.DataFrame, outputs: dict[str, str]) -> pd.DataFrame:
    """Integer ticks on every x axis, then PNG + PDF of the figure and CSV of its data."""
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    save_figure(fig, outputs["png"], outputs["pdf"])
    _write_csv(df, outputs["csv"])
    return df


def _write_csv(df: pd.DataFrame, path: str) -> None:
    from kvspec.io import write_text

    write_text(path, df.to_csv(index=False))


def _long_metrics(rec: dict[str, Any]) -> list[tuple[str, float, bool]]:
    return [
        (
            col,
            m["value"] if m["metric"] in PPL_METRICS else 100 * m["value"],
            m["metric"] in PPL_METRICS,
        )
        for col, m in rec["metrics"].items()
    ]


def figure_3_4(item: dict, outputs: dict[str, str]) -> pd.DataFrame:
    """CARE-E accuracy (and perplexity) vs calibration sample count and sequence length."""
    rows = []
    for row in item["rows"]:
        for col, value, is_ppl in _long_metrics(read_json(row["file"])):
            rows.append(
                {
                    **{k: row[k] for k in ("sweep", "n", "t", "rank")},
                    "column": col,
                    "value": value,
                    "perplexity": is_ppl,
                }
            )
    df = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (sweep, x) in zip(axes, (("n_samples", "n"), ("seq_len", "t")), strict=True):
        part = df[df["sweep"] == sweep]
        twin = ax.twinx()
        several = part["rank"].nunique() > 1
        for (col, rank), sub in part.groupby(["column", "rank"], sort=False):
            sub = sub.sort_values(x)
            target = twin if sub["perplexity"].iloc[0] else ax
            style = {"ls": "--"} if sub["perplexity"].iloc[0] else {}
            label = TASK_NAMES.get(col, col) + (f" r={rank}" if several else "")
            target.plot(sub[x], sub["value"], marker="o", ms=3, label=label, **style)
        ax.set_xscale("log", base=2)
        fixed = f"T={part['t'].iloc[0]}" if sweep == "n_samples" else f"N={part['n'].iloc[0]}"
        ax.set_xlabel(f"calibration {'samples N' if x == 'n' else 'sequence length T'} ({fixed})")
        ax.set_ylabel("accuracy (%)")
        twin.set_ylabel("WikiText-2 perplexity (dashed)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    ranks = ", ".join(str(r) for r in sorted(df["rank"].unique()))
    fig.suptitle(f"CARE-E on {item['model']}, rank {ranks}")
    fig.tight_layout()
    save_figure(fig, outputs["png"], outputs["pdf"])
    _write_csv(df, outputs["csv"])
    return df


def figure_3_1(item: dict, paper_csv: list[str], outputs: dict[str, str]) -> pd.DataFrame:
    """(a, b) accuracy with one layer's rank halved; (c) perplexity change per SV group."""
    base = {col: value for col, value, _ in _long_metrics(read_json(item["baseline"]))}
    rows = []
    for row in item["rows"]:
        for col, value, _ in _long_metrics(read_json(row["file"])):
            rows.append(
                {
                    "source": "ours",
                    "panel": row["panel"],
                    "index": row["index"],
                    "column": col,
                    "value": value,
                    "baseline": base[col],
                    "delta": value - base[col],
                }
            )
    if paper_csv:
        paper, _ = read_paper_table(paper_csv[0])
        for p in paper.itertuples(index=False):
            rows.append(
                {
                    "source": f"paper ({p.model})",
                    "panel": "baseline",
                    "index": np.nan,
                    "column": p.benchmark,
                    "value": float(p.baseline_accuracy),
                    "baseline": float(p.baseline_accuracy),
                    "delta": 0.0,
                }
            )
    df = pd.DataFrame(rows)
    ours = df[df["source"] == "ours"]
    halve_cols = list(item["halve_columns"])
    fig, axes = plt.subplots(1, len(halve_cols) + 1, figsize=(4 * (len(halve_cols) + 1), 3.4))
    for ax, col in zip(axes, halve_cols, strict=False):
        part = ours[(ours["panel"] == "halve") & (ours["column"] == col)].sort_values("index")
        ax.plot(part["index"], part["value"], marker="o", ms=3)
        ax.axhline(base[col], ls=":", color="k", label=f"original {base[col]:.1f}")
        ax.set_title(f"{TASK_NAMES.get(col, col)}: one layer's rank halved")
        ax.set_xlabel("layer")
        ax.set_ylabel("accuracy (%)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    col = item["group_columns"][0]
    part = ours[(ours["panel"] == "svgroup") & (ours["column"] == col)].sort_values("index")
    ax = axes[-1]
    ax.plot(part["index"] + 1, part["delta"], marker="o", ms=3)
    ax.set_title(f"SV group removed in last {item['last_layers']} layers")
    ax.set_xlabel(f"group (1 = largest of {item['groups']})")
    ax.set_ylabel(f"Δ {TASK_NAMES.get(col, col)}")
    ax.grid(alpha=0.3)
    return _save_with_integer_x(fig, axes, df, outputs)


def render(item: dict, inputs: dict[str, list[str]], outputs: dict[str, str]) -> None:
    """Render one CARE report item (`item["name"]`, rows from `kvspec.plan.care`)."""
    name, paper = item["name"], inputs.get("paper", [])
    if name in ("table_3_1", "table_3_2"):
        main_table(item, paper[0], outputs)
    elif name == "table_3_4":
        table_3_4(item, paper[0], outputs)
    elif name == "table_3_5":
        table_3_5(item, paper[0], outputs)
    elif name == "figure_3_3":
        figure_3_3(item, outputs)
    elif name == "figure_3_4":
        figure_3_4(item, outputs)
    elif name == "figure_3_1":
        figure_3_1(item, paper, outputs)
    else:
        raise ValueError(f"unknown CARE report item {name!r}")
