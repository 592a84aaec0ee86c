"""Uncertainty of our measurements: lm-eval standard errors per cell, paired differences
between two model variants scored on the same documents (the comparisons the thesis makes),
and the prompt-sampling error of a ratio over prompts (a drafter's tokens per target forward)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

PPL_METRICS = ("word_perplexity", "byte_perplexity")
SE = " stderr (ours)"


def _accuracy_columns(record: Mapping[str, Any], columns: Sequence[str] | None) -> list[str]:
    return [
        col
        for col, m in record["metrics"].items()
        if m["metric"] not in PPL_METRICS and (columns is None or col in columns)
    ]


def stderr_row(
    record: Mapping[str, Any], ppl_column: str = "wiki_ppl", columns: Sequence[str] | None = None
) -> dict[str, float]:
    """lm-eval's standard error of each measured column, in the table's units (accuracy in
    points), and of `avg` (mean of independent task means: sqrt(sum se^2) / k)."""
    row: dict[str, float] = {}
    for col, m in record["metrics"].items():
        if columns is not None and col not in columns:
            continue
        se = m.get("stderr")
        scale = 1.0 if m["metric"] in PPL_METRICS else 100.0
        row[ppl_column if col == "wiki" else col] = scale * se if se is not None else math.nan
    accs = [row[c] for c in _accuracy_columns(record, columns)]
    row["avg"] = math.sqrt(sum(se**2 for se in accs)) / len(accs) if accs else math.nan
    return row


def paired_difference(
    a: Mapping[str, Any], b: Mapping[str, Any], columns: Sequence[str] | None = None
) -> dict[str, tuple[float, float, int]]:
    """(mean of a - b, its standard error, documents) per accuracy column, in points, over the
    documents both variants were scored on (lm-eval per-document scores), and for `avg`."""
    out: dict[str, tuple[float, float, int]] = {}
    for col in _accuracy_columns(a, columns):
        da, db = a["metrics"][col].get("per_doc"), b["metrics"].get(col, {}).get("per_doc")
        if not da or not db:
            continue
        common = sorted(set(da) & set(db))
        d = 100 * np.array([da[k] - db[k] for k in common])
        se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else math.nan
        out[col] = (float(d.mean()), se, len(d))
    if out:
        k = len(out)
        mean = sum(v[0] for v in out.values()) / k
        se = math.sqrt(sum(v[1] ** 2 for v in out.values())) / k
        out["avg"] = (mean, se, sum(v[2] for v in out.values()))
    return out


def ratio_stderr(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """Standard error of Σ numerators / Σ denominators over independent units (e.g. prompts:
    tokens over target forwards, a drafter's τ), by the delta method: the standard error of the
    mean of the ratio's linearisation (n_i − R·d_i) / mean(d); NaN below two units."""
    return _ratio_se(_linearised(numerators, denominators))


def paired_ratio_difference(
    a: tuple[Sequence[float], Sequence[float]], b: tuple[Sequence[float], Sequence[float]]
) -> tuple[float, float]:
    """R_a − R_b of two ratios (numerators, denominators) measured on the same units in the
    same order, and its standard error with the units paired (delta method)."""
    za, zb = _linearised(*a), _linearised(*b)
    if len(za) != len(zb):
        raise ValueError(f"paired ratios need the same units, got {len(za)} and {len(zb)}")
    return _ratio(*a) - _ratio(*b), _ratio_se(za - zb)


def paired_speed_ratio(
    a: tuple[Sequence[float], Sequence[float]], b: tuple[Sequence[float], Sequence[float]]
) -> tuple[float, float]:
    """Speed of a ÷ speed of b, each (tokens, seconds) per unit (prompt) in the same order, a
    speed being Σ tokens / Σ seconds; and its standard error with the units paired (delta
    method on the log: ln R's linearisation per unit is t_a/T_a − s_a/S_a − t_b/T_b + s_b/S_b).
    With equal tokens per unit it is `ratio_stderr(seconds_b, seconds_a)`. NaN below two units."""
    arrays = [np.asarray(x, dtype=float) for x in (*a, *b)]
    if len({x.shape for x in arrays}) != 1 or not len(arrays[0]):
        raise ValueError("a paired speed ratio needs tokens and seconds for the same units")
    if any(x.sum() <= 0 for x in arrays):
        raise ValueError("tokens and seconds must sum above 0")
    ta, sa, tb, sb = arrays
    ratio = float((ta.sum() / sa.sum()) / (tb.sum() / sb.sum()))
    w = ta / ta.sum() - sa / sa.sum() - tb / tb.sum() + sb / sb.sum()
    se = ratio * math.sqrt(len(w)) * float(w.std(ddof=1)) if len(w) > 1 else math.nan
    return ratio, se


def paired_runs_ratio(
    a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]
) -> tuple[float, float, int]:
    """`paired_speed_ratio` of two methods' timed runs (prompt -> a speed benchmark record
    with `tokens` and `seconds`) over the prompts both ran, in a's order; and how many."""
    prompts = [q for q in a if q in b]
    if not prompts:
        raise ValueError("the two methods ran no prompt in common")

    def timed(runs: Mapping[str, Mapping[str, Any]]) -> tuple[list[int], list[float]]:
        return [len(runs[q]["tokens"]) for q in prompts], [runs[q]["seconds"] for q in prompts]

    return (*paired_speed_ratio(timed(a), timed(b)), len(prompts))


def _ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    return float(np.sum(numerators) / np.sum(denominators))


def _linearised(numerators: Sequence[float], denominators: Sequence[float]) -> np.ndarray:
    n, d = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if n.shape != d.shape or not len(d) or d.sum() <= 0:
        raise ValueError("a ratio needs as many numerators as denominators, summing above 0")
    return (n - _ratio(n, d) * d) / d.mean()


def _ratio_se(z: np.ndarray) -> float:
    return float(z.std(ddof=1) / math.sqrt(len(z))) if len(z) > 1 else math.nan


def documents_to_resolve(se: float, n: int, points: float = 3.0, z: float = 2.0) -> int | None:
    """Documents at which a paired standard error `se` (points, measured on `n` documents, falling
    as 1/sqrt(n)) would put a `points` difference `z` errors from zero; None when `se` is not
    positive (identical answers or one document: nothing to extrapolate from)."""
    if not se > 0 or n < 2:
        return None
    return math.ceil(n * (se * z / points) ** 2)


def add_stderr(df: pd.DataFrame, ours: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """`df` (a side-by-side table) with a "<m> stderr (ours)" column after each "<m> (ours)"
    that `ours` (keys + metric columns of standard errors) has."""
    renamed = ours.rename(columns={c: f"{c}{SE}" for c in ours.columns if c not in keys})
    merged = df.merge(renamed, on=keys, how="left")
    order = []
    for col in df.columns:
        order.append(col)
        if col.endswith(" (ours)") and f"{col[: -len(' (ours)')]}{SE}" in merged:
            order.append(f"{col[: -len(' (ours)')]}{SE}")
    return merged[order]


def display_with_stderr(df: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """For Markdown: each "<m> (ours)" cell as "value ± stderr", stderr columns dropped."""
    shown = df.copy()
    for col in [c for c in df.columns if c.endswith(SE)]:
        value = f"{col[: -len(SE)]} (ours)"
        shown[value] = [_pm(v, se, digits) for v, se in zip(df[value], df[col], strict=True)]
        shown = shown.drop(columns=col)
    return shown


def _pm(value: Any, se: Any, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = f"{value:.{digits}g}"
    if se is None or (isinstance(se, float) and math.isnan(se)):
        return text
    return f"{text} ± {se:.2g}"


def bootstrap_ci(values: Sequence[float], iterations: int, seed: int,
                 level: float = 0.95) -> tuple[float, float]:  # fmt: skip
    """Percentile bootstrap interval of the mean of `values` (resampled with replacement)."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(iterations, len(x)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))


def sign_flip_pvalue(differences: Sequence[float], iterations: int, seed: int) -> float:
    """Two-sided p-value of a zero mean paired difference by flipping signs: exact over all
    2^n flips for n <= 16, else Monte Carlo."""
    d = np.asarray(differences, dtype=float)
    observed = abs(d.mean())
    if len(d) <= 16:
        signs = np.array(np.meshgrid(*[[-1.0, 1.0]] * len(d))).reshape(len(d), -1).T
    else:
        signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(iterations, len(d)))
    flipped = np.abs((signs * d).mean(axis=1))
    return float((flipped >= observed - 1e-12).mean())
