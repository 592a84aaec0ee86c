"""How well infini-gram next-token distributions agree with the target model's.

Acceptance of a draft distribution q under a target p is 1 - TV(p, q) = 1 - 1/2 |p - q|_1,
the probability that a token drawn from q survives rejection sampling against p. Everything
here is a pure function over per-position records of a greedy output, except
`position_records`, which computes those records with one target forward pass and one
`infgram_ntd` query per position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from kvspec.spec.drafters import InfiniGramDrafter, greedy_token
from kvspec.spec.ngram_index import CheckedEngine

Dist = dict[int, float]
MATCH_LENGTH_BINS = (0, 2, 4, 6, 8, 10, 12, 14, 16)
CONFIDENCE_THRESHOLDS = (None, 0.5, 0.6, 0.7)
HIT_LENGTHS = (0, 4, 8, 16)


@dataclass
class PositionRecord:
    """One output position: the target's token and distribution, the n-gram's, the match."""

    token: int  # the target's greedy token here
    p: torch.Tensor  # (V,) target next-token distribution
    q: Dist  # infgram_ntd distribution given the same context
    suffix_len: int  # longest context suffix found in the index
    count: int  # occurrences of that suffix


def tv_acceptance(p: torch.Tensor | Dist, q: torch.Tensor | Dist) -> float:
    """1 - 1/2 |p - q|_1 for dense (V,) tensors or sparse {token: prob} dicts, mixed freely."""
    if isinstance(p, torch.Tensor) and isinstance(q, torch.Tensor):
        return 1.0 - 0.5 * float((p.double() - q.double()).abs().sum())
    if isinstance(p, dict) and isinstance(q, dict):
        keys = p.keys() | q.keys()
        return 1.0 - 0.5 * sum(abs(p.get(t, 0.0) - q.get(t, 0.0)) for t in keys)
    dense, sparse = (p, q) if isinstance(p, torch.Tensor) else (q, p)
    return 1.0 - 0.5 * _l1_dense_sparse(dense.double(), sparse)


def _l1_dense_sparse(dense: torch.Tensor, sparse: Dist) -> float:
    """|dense - sparse|_1 without densifying: the support of `sparse` plus dense mass outside it."""
    ids = torch.tensor(list(sparse), dtype=torch.long)
    vals = torch.tensor(list(sparse.values()), dtype=torch.float64)
    on_support = dense[ids] if len(ids) else torch.zeros(0, dtype=torch.float64)
    outside = float(dense.sum()) - float(on_support.sum())
    return float((on_support - vals).abs().sum()) + outside


def top1(q: Dist) -> float:
    """Probability of the draft distribution's most likely token (its confidence)."""
    return max(q.values()) if q else 0.0


def acceptance_by_match_length(
    records: Sequence[PositionRecord], bins: Sequence[int] = MATCH_LENGTH_BINS
) -> dict[int, dict[str, float]]:
    """Mean acceptance over positions whose matched suffix is at least each bin's length."""
    return {b: _summary([r for r in records if r.suffix_len >= b], len(records)) for b in bins}


def acceptance_by_confidence(
    records: Sequence[PositionRecord],
    thresholds: Sequence[float | None] = CONFIDENCE_THRESHOLDS,
) -> dict[str, dict[str, float]]:
    """Mean acceptance over positions whose q top-1 probability exceeds each threshold."""
    out = {}
    for t in thresholds:
        kept = [r for r in records if t is None or top1(r.q) > t]
        out["all" if t is None else f">{t}"] = _summary(kept, len(records))
    return out


def _summary(kept: Sequence[PositionRecord], total: int) -> dict[str, float]:
    """Mean acceptance, number of positions, and their share of all positions."""
    scores = [tv_acceptance(r.p, r.q) for r in kept]
    mean = sum(scores) / len(scores) if scores else float("nan")
    return {"acceptance": mean, "n": len(kept), "coverage": len(kept) / total if total else 0.0}


def match_hit_rates(
    records: Sequence[PositionRecord], lengths: Sequence[int] = HIT_LENGTHS
) -> dict[int, float]:
    """Share of positions whose context matched a suffix of at least each length."""
    n = len(records)
    return {m: sum(r.suffix_len >= m for r in records) / n if n else 0.0 for m in lengths}


def greedy_hits(records: Sequence[PositionRecord], confidence: float = 0.0) -> list[bool]:
    """Per position: would the greedy n-gram draft equal the target's token (and pass the cut)?"""
    return [bool(r.q) and top1(r.q) >= confidence and greedy_token(r.q) == r.token for r in records]


def expected_accepted_tokens(
    records: Sequence[PositionRecord], k: int, confidence: float = 0.0
) -> float:
    """Mean drafts accepted per speculation of length k under greedy verification.

    Replays speculation along the greedy output: while drafts are accepted the drafter's
    context equals the output prefix, so draft j of a speculation is the n-gram mode at
    that position, and the first miss (or k hits) ends the speculation. As in
    `speculative_generate`, the last output token is always the target's own.
    """
    hits = greedy_hits(records, confidence)
    accepted, pos = [], 0
    while pos < len(hits):
        a = 0
        while a < k and pos + a < len(hits) - 1 and hits[pos + a]:
            a += 1
        accepted.append(a)
        pos += a + 1
    return sum(accepted) / len(accepted) if accepted else 0.0


@torch.inference_mode()
def position_records(
    target: torch.nn.Module,
    engine: Any,
    prompt_ids: Sequence[int],
    output_ids: Sequence[int],
    temperature: float = 1.0,
) -> list[PositionRecord]:
    """Records for each output position: target p (teacher-forced) and infgram_ntd q.

    `engine` is a CheckedEngine or an InfiniGramDrafter (the distribution is counted by
    `InfiniGramDrafter.distribution`, which equals `infgram_ntd`), or anything else with
    an `infgram_ntd` method. The n-gram context is the prompt plus the output so far, as
    in decoding.
    """
    ngram = InfiniGramDrafter(engine) if isinstance(engine, CheckedEngine) else engine
    prompt, output = [int(t) for t in prompt_ids], [int(t) for t in output_ids]
    ids = torch.tensor([prompt + output], dtype=torch.long, device=target.device)  # (1, P+N)
    logits = target(input_ids=ids).logits[0, len(prompt) - 1 : -1].cpu()  # (N, V)
    probs = torch.softmax(logits.double() / temperature, dim=-1)  # (N, V)
    records = []
    for i, token in enumerate(output):
        if isinstance(ngram, InfiniGramDrafter):
            q, suffix_len, count = ngram.distribution(prompt + output[:i])
            records.append(PositionRecord(token, probs[i], q, suffix_len, count))
            continue
        res = ngram.infgram_ntd(prompt + output[:i])
        if "error" in res:
            raise RuntimeError(f"infgram_ntd failed at position {i}: {res['error']}")
        q = {int(t): float(r["prob"]) for t, r in res["result_by_token_id"].items()}
        records.append(
            PositionRecord(token, probs[i], q, int(res["suffix_len"]), int(res["prompt_cnt"]))
        )
    return records


# ------------------------------------------------------- per-position rows and their tables
# The workflow stores one flat row per output position (a DataFrame), not PositionRecords:
# a dense (V,) target distribution per position would not fit in memory at scale.

ROW_COLUMNS = ("token", "acceptance", "q_top1", "q_mode", "suffix_len", "count")


def position_row(record: PositionRecord) -> dict[str, float | int]:
    """The summary of one position that every table and figure needs."""
    return {
        "token": record.token,
        "acceptance": tv_acceptance(record.p, record.q),
        "q_top1": top1(record.q),
        "q_mode": greedy_token(record.q) if record.q else -1,
        "suffix_len": record.suffix_len,
        "count": record.count,
    }


def acceptance_grid(
    rows: pd.DataFrame,
    bins: Sequence[int] = MATCH_LENGTH_BINS,
    thresholds: Sequence[float | None] = (None,),
) -> pd.DataFrame:
    """Mean acceptance (and n) per confidence threshold x minimum match length.

    A position counts toward min match length m if its matched suffix is at least m
    tokens long, and toward threshold t if its n-gram top-1 probability exceeds t
    (thesis Tables 4.1-4.3). Cells with no positions are NaN.
    """
    out = []
    for t in thresholds:
        kept = rows if t is None else rows[rows["q_top1"] > t]
        for m in bins:
            cell = kept[kept["suffix_len"] >= m]["acceptance"]
            out.append(
                {
                    "threshold": "all" if t is None else f">{t}",
                    "min_match": m,
                    "acceptance": float(cell.mean()) if len(cell) else float("nan"),
                    "n": len(cell),
                }
            )
    return pd.DataFrame(out)


def accepted_per_speculation(
    rows: pd.DataFrame, k: int, min_match: int = 0, confidence: float = 0.0
) -> dict[str, float]:
    """Mean drafts accepted per speculation (greedy), speculating only where the match is long.

    Rows are grouped by `prompt` and replayed in `pos` order as in
    `expected_accepted_tokens`; a speculation starts only at positions whose matched
    suffix has at least `min_match` tokens (elsewhere the target decodes one token alone),
    and stops at the first draft whose n-gram top-1 probability is below `confidence`.
    """
    total = n_specs = 0
    for _, group in rows.sort_values(["prompt", "pos"]).groupby("prompt", sort=False):
        hits = ((group["q_mode"] == group["token"]) & (group["q_top1"] >= confidence)).tolist()
        for a in _replay(hits, group["suffix_len"].tolist(), k, min_match):
            total, n_specs = total + a, n_specs + 1
    mean = total / n_specs if n_specs else float("nan")
    return {"accepted": mean, "speculations": n_specs}


def _replay(hits: list[bool], suffix_lens: list[int], k: int, min_match: int) -> list[int]:
    """Accepted drafts of each speculation along one greedy output."""
    accepted, pos, n = [], 0, len(hits)
    while pos < n:
        if suffix_lens[pos] < min_match:
            pos += 1
            continue
        a = 0
        while a < k and pos + a < n - 1 and hits[pos + a]:
            a += 1
        accepted.append(a)
        pos += a + 1
    return accepted


def hit_rate_table(rows: pd.DataFrame, lengths: Sequence[int] = HIT_LENGTHS) -> dict[int, float]:
    """Share of positions whose matched suffix has at least each length (thesis Table 4.6)."""
    n = len(rows)
    return {m: float((rows["suffix_len"] >= m).sum() / n) if n else 0.0 for m in lengths}


def acceptance_surface(rows: pd.DataFrame, max_len: int = 32, freq_bins: int = 10) -> pd.DataFrame:
    """Mean acceptance per (match length, log10 match count) cell (thesis Figure 4.1).

    Match lengths above `max_len` are clipped to it; counts are binned on a log10 scale
    into `freq_bins` equal-width bins between the smallest and largest count.
    """
    if rows.empty:
        return pd.DataFrame(columns=["match_len", "log10_count", "acceptance", "n"])
    length = rows["suffix_len"].clip(upper=max_len)
    logc = np.log10(rows["count"].clip(lower=1).astype(float))
    edges = np.linspace(logc.min(), logc.max() + 1e-9, freq_bins + 1)
    centre = (edges[:-1] + edges[1:]) / 2
    which = np.clip(np.digitize(logc, edges) - 1, 0, freq_bins - 1)
    cells = pd.DataFrame({"match_len": length, "bin": which, "acceptance": rows["acceptance"]})
    grid = cells.groupby(["match_len", "bin"])["acceptance"].agg(["mean", "size"]).reset_index()
    return pd.DataFrame(
        {
            "match_len": grid["match_len"].astype(int),
            "log10_count": centre[grid["bin"].to_numpy()],
            "acceptance": grid["mean"],
            "n": grid["size"].astype(int),
        }
    )


def acceptance_rows(
    target: torch.nn.Module,
    engine: Any,
    items: Sequence[tuple[str, Sequence[int], Sequence[int]]],
    temperature: float = 1.0,
) -> pd.DataFrame:
    """One row per output position of every (prompt id, prompt ids, output ids) item.

    Columns: prompt, pos and `ROW_COLUMNS`. Progress goes to stderr (the rule log).
    """
    from tqdm import tqdm

    frames = []
    for prompt_id, prompt, output in tqdm(items, desc="acceptance", unit="prompt", mininterval=5):
        if not output:
            continue
        records = position_records(target, engine, prompt, output, temperature)
        rows = pd.DataFrame([position_row(r) for r in records])
        rows.insert(0, "pos", range(len(rows)))
        rows.insert(0, "prompt", prompt_id)
        frames.append(rows)
    if not frames:
        raise ValueError("no output positions to analyse (every output is empty)")
    return pd.concat(frames, ignore_index=True)
