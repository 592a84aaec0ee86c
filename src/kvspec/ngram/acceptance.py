"""How well infini-gram next-token distributions agree with the target model's.

Acceptance of a draft distribution q under a target p is Σ_t min(p_t, q_t) (= 1 - TV(p, q)),
the probability that a token drawn from q survives rejection sampling against p.
`position_records` computes, per output position, p (one teacher-forced target pass) and q
(one longest-suffix lookup); `acceptance_rows` flattens them into one row per position, and
`kvspec.ngram.acceptance_stats` (no torch) turns the rows into the thesis's tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from kvspec.ngram.drafters import InfiniGramDrafter, greedy_token
from kvspec.ngram.index import CheckedEngine

Dist = dict[int, float]


@dataclass
class PositionRecord:
    """One output position: the target's token and distribution, the n-gram's, the match."""

    token: int  # the target's greedy token here
    p: torch.Tensor  # (V,) target next-token distribution
    q: Dist  # infgram_ntd distribution given the same context
    suffix_len: int  # longest context suffix found in the index
    count: int  # occurrences of that suffix


def tv_acceptance(p: torch.Tensor | Dist, q: torch.Tensor | Dist) -> float:
    """Σ_t min(p_t, q_t) (= 1 - TV(p, q) for two distributions) for dense (V,) tensors or
    sparse {token: prob} dicts, mixed freely.

    Summed over q's support, so an empty q (no n-gram distribution) accepts nothing (0.0),
    where 1 - 1/2 |p - q|_1 would say 0.5.
    """
    if isinstance(q, torch.Tensor):
        dense_p = p if isinstance(p, torch.Tensor) else _densify(p, q.shape[-1])
        return float(torch.minimum(dense_p.double(), q.double()).sum())
    if not q:
        return 0.0
    if isinstance(p, dict):
        return float(sum(min(p.get(t, 0.0), v) for t, v in q.items()))
    ids = torch.tensor(list(q), dtype=torch.long)
    vals = torch.tensor(list(q.values()), dtype=torch.float64)
    return float(torch.minimum(p.double()[ids], vals).sum())


def _densify(p: Dist, vocab: int) -> torch.Tensor:
    dense = torch.zeros(vocab, dtype=torch.float64)
    for t, v in p.items():
        dense[int(t)] = v
    return dense


def top1(q: Dist) -> float:
    """Probability of the draft distribution's most likely token (its confidence)."""
    return max(q.values()) if q else 0.0


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
    in decoding. Ids are the model's throughout, also over a compact-vocabulary index.
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

ROW_COLUMNS = (
    "token", "acceptance", "q_top1", "q_mode", "suffix_len", "count", "p_top1", "p_q_mode", "hit",
)  # fmt: skip


def position_row(record: PositionRecord) -> dict[str, float | int]:
    """The summary of one position that every table and figure needs.

    Beside the thesis's columns: `p_top1`, the target's own confidence; `p_q_mode`, the
    target's probability of the n-gram's mode (what a greedy n-gram draft is accepted
    with under sampling); `hit`, 1 when the mode is the target's greedy token.
    """
    mode = greedy_token(record.q) if record.q else -1
    return {
        "token": record.token,
        "acceptance": tv_acceptance(record.p, record.q),
        "q_top1": top1(record.q),
        "q_mode": mode,
        "suffix_len": record.suffix_len,
        "count": record.count,
        "p_top1": float(record.p.max()),
        "p_q_mode": float(record.p[mode]) if mode >= 0 else 0.0,
        "hit": int(mode == int(torch.argmax(record.p))) if mode >= 0 else 0,
    }


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
