"""Document 002's Tables 3, 4 and 7 from the remote stage's runs (one JSON per head): speed
over the emulated links, HumanEval pass@1 when the link is cut, and message sizes against
the document's formulas — beside the document's numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.remote import protocol as p
from kvspec.report.tables import paper_numeric, save_with_paper, side_by_side

PAPER_ROW = {"moa": "Ours", "eagle": "EAGLE", "independent": "Independent"}  # Table 7's rows
LOWER_BOUND = "Without local model (lower bound)"


def _beside(ours: pd.DataFrame, paper_csv: str, keys: list[str],
            metrics: Sequence[str]) -> pd.DataFrame:  # fmt: skip
    """`<m> (ours)` and `<m> (paper)` per metric (missing on one side: empty), outer-joined
    on `keys`; our other columns follow."""
    return side_by_side(ours, paper_numeric(paper_csv), keys, metrics, keep_rest=True)


def _runs(files: Sequence[str]) -> list[dict[str, Any]]:
    return [read_json(f) for f in files]


def _label(job: Mapping[str, Any], item: Mapping[str, Any]) -> str:
    name = job["meta"]["drafter"]
    return item["labels"].get(name, name)


def table_3(jobs: list[dict[str, Any]], item: Mapping[str, Any], paper_csv: str) -> pd.DataFrame:
    """Tokens/s per link profile, τ (tokens per call to the target) and calls per answer."""
    rows = []
    for job in jobs:
        uncut = [r for r in job["runs"] if r["cut"] is None]
        row: dict[str, Any] = {"drafter": _label(job, item)}
        for profile in job["meta"]["profiles"]:
            runs = [r for r in uncut if r["profile"] == profile]
            row[f"tps_{profile.lower()}"] = (sum(r["new_tokens"] for r in runs)
                                             / sum(r["new_tokens"] / r["tokens_per_s"]
                                                   for r in runs))  # fmt: skip
        first = [r for r in uncut if r["profile"] == job["meta"]["profiles"][0]]
        row["accept_len"] = sum(r["verified"] for r in first) / sum(r["calls"] for r in first)
        row["calls_large"] = sum(r["calls"] for r in first) / len(first)
        row["trainable_size"] = f"{job['head']['trainable_parameters'] / 1e6:.2f}M"
        row["answers"] = len(first)
        rows.append(row)
    ours = pd.DataFrame(rows)
    metrics = [c for c in ours.columns if c.startswith("tps_")] + ["accept_len", "calls_large"]
    table = _beside(ours, paper_csv, ["drafter"], metrics)
    ours_cols = [f"{m} (ours)" for m in metrics] + ["trainable_size", "answers"]
    table.loc[table.duplicated(subset=["drafter"]), ours_cols] = None  # ours on the first only
    return table


def table_4(jobs: list[dict[str, Any]], item: Mapping[str, Any], paper_csv: str) -> pd.DataFrame:
    """HumanEval pass@1 (%) when the link is cut after B new tokens and the client finishes
    alone, per drafter; the lower bound stops at B (the uncut answer's first B tokens); and,
    ours only, how much of the uncut answer each cut answer keeps (`same_prefix` rows)."""
    rows, same = [], []
    cuts = list(item["cuts"])
    for i, job in enumerate(jobs):
        first = job["meta"]["profiles"][0]
        uncut = [r for r in job["runs"] if r["cut"] is None and r["profile"] == first]
        inf = 100 * sum(r["passed"] for r in uncut) / len(uncut)
        row = {"scenario": "disconnect", "drafter": _label(job, item), "b_inf": inf}
        bound = {"scenario": "stop_no_local_model", "drafter": LOWER_BOUND, "b_inf": inf}
        for b in cuts:
            cut = [r for r in job["runs"] if r["cut"] == b]
            row[f"b_{b}"] = 100 * sum(r["passed"] for r in cut) / len(cut)
            bound[f"b_{b}"] = 100 * sum(r["lower_bound_passed"] for r in cut) / len(cut)
        rows.append(row)
        same.append({"scenario": "same_prefix", "drafter": row["drafter"],
                     **same_prefix(job, cuts)})  # fmt: skip
        if i == len(jobs) - 1:  # greedy answers are the same for every head: one lower bound
            rows.append(bound)
    rows += same
    metrics = [*(f"b_{b}" for b in sorted({*cuts, 1, 10, 25, 50})), "b_inf"]
    table = _beside(pd.DataFrame(rows), paper_csv, ["scenario", "drafter"], metrics)
    ours = [f"{m} (ours)" for m in metrics]
    table.loc[table.duplicated(subset=["scenario", "drafter"]), ours] = None
    return table


def same_prefix(job: Mapping[str, Any], cuts: Sequence[int]) -> dict[str, float]:
    """Per B, the mean share (%) of the uncut answer (first profile) that an answer cut at B
    reproduces before its first differing token; b_inf: the other profiles' uncut answers
    (lossless decoding: 100)."""
    first = job["meta"]["profiles"][0]
    uncut = {r["prompt"]: r["tokens"] for r in job["runs"] if r["cut"] is None
             and r["profile"] == first}  # fmt: skip
    others = [r for r in job["runs"] if r["cut"] is None and r["profile"] != first]
    groups = {f"b_{b}": [r for r in job["runs"] if r["cut"] == b] for b in cuts}
    out = {}
    for key, runs in {**groups, "b_inf": others}.items():
        shares = [_prefix(r["tokens"], uncut[r["prompt"]]) for r in runs]
        out[key] = 100 * sum(shares) / len(shares) if shares else float("nan")
    return out


def _prefix(tokens: Sequence[int], reference: Sequence[int]) -> float:
    pairs = zip(tokens, reference, strict=False)
    n = next((i for i, (a, b) in enumerate(pairs) if a != b),
             min(len(tokens), len(reference)))  # fmt: skip
    return n / max(len(reference), 1)


def message_sizes(job: Mapping[str, Any]) -> dict[str, Any]:
    """Mean measured bytes per DRAFT and VERDICT (uncut runs, first reply apart) against
    Table 7's formulas at each message's M and A, and whether every message equals formula +
    our framing and row scales exactly."""
    meta, dims = job["meta"], job["meta"]["dims"]
    kind = meta["declaration"]["kind"]
    table = {"moa": "ours"}.get(kind, kind)
    client, server, firsts, exact = [], [], [], True
    for run in (r for r in job["runs"] if r["cut"] is None):
        msg = run["messages"]
        firsts.append((msg["received"][0], msg["rows"][0]))
        for i in range(1, len(msg["sent"])):
            m, a = msg["nodes"][i], msg["tokens_back"][i]
            t7 = p.table7_bytes(table, m=m, a=a, hidden=dims["hidden"], kv=dims["e_kv"],
                                tli=dims["tli"])  # fmt: skip
            over = p.verdict_overhead(msg["rows"][i])
            client.append((m, msg["sent"][i], t7["client"], p.HEADER.size))
            server.append((a, msg["received"][i], t7["server"], over))
            exact &= msg["sent"][i] == t7["client"] + p.HEADER.size
            exact &= msg["received"][i] == t7["server"] + over
    mean = lambda rows, j: sum(r[j] for r in rows) / len(rows)  # noqa: E731
    return {"drafter": PAPER_ROW[kind], "messages": len(client), "mean_M": mean(client, 0),
            "client_bytes": mean(client, 1), "client_formula": mean(client, 2),
            "client_framing": mean(client, 3), "mean_A": mean(server, 0),
            "server_bytes": mean(server, 1), "server_formula": mean(server, 2),
            "server_framing_scales": mean(server, 3), "exact": exact,
            "first_reply_gzip_bytes": mean(firsts, 0),
            "first_reply_rows": sum(sum(r) for _, r in firsts) / len(firsts),
            "E": dims["hidden"], "E_kv": dims["e_kv"], "TLI": dims["tli"]}  # fmt: skip


def table_7(jobs: list[dict[str, Any]], item: Mapping[str, Any], paper_csv: str) -> pd.DataFrame:
    """The document's formulas (its rows) beside our measured mean sizes per head."""
    ours = pd.DataFrame([{"head": _label(job, item), **message_sizes(job)} for job in jobs])
    paper = paper_numeric(paper_csv)
    return paper.merge(ours, on="drafter", how="outer", sort=False)


NOTES = [
    "Ours: the configured target on a server process and each head on a client process "
    "(Python, one thread each), TCP on the loopback; greedy verification, so every answer is "
    "the target's greedy answer (tests check this token for token).",
    "Links: tc netem is unavailable (the kernel has no sch_netem), so messages are shaped in "
    "the transport (kvspec.remote.link): per 1400-byte packet a normal delay (5G 10 +- 10 ms; "
    "4G 21 +- 19 ms at 20 Mbit/s), 0.1% loss per transmission, each loss costing a 200 ms "
    "retransmission timeout; both directions shaped.",
]


def _notes(item: Mapping[str, Any], extra: list[str]) -> list[str]:
    bench = item["bench"]
    tree = f"EAGLE-2 trees {item['tree']}" if item["tree"] else f"chains of {item['chain_k']}"
    return [*NOTES, f"Prompts: the first {bench['n']} of set {bench['name']!r}; {tree}; at "
            f"most {item['max_new_tokens']} new tokens per answer.", *extra]  # fmt: skip


def render_table_3(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                   out: Mapping[str, str]) -> None:  # fmt: skip
    table = table_3(_runs(inputs["runs"]), item, inputs["paper"][0])
    save_with_paper(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        "tps: new tokens / wall seconds per answer, pooled (warm-up discarded); accept_len: "
        "verified tokens per call to the target; calls_large: calls per answer. Rows without "
        "(ours) are the document's drafters we do not run."]))  # fmt: skip


def render_table_4(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                   out: Mapping[str, str]) -> None:  # fmt: skip
    table = table_4(_runs(inputs["runs"]), item, inputs["paper"][0])
    save_with_paper(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        "b_N: the client stops sending after exactly N verified tokens (drafts never reach "
        "past N) and finishes with its drafter's own greedy continuation (MoA: CA over the "
        "LSA vectors received so far, the target's last TLI layers with their cache; EAGLE: "
        "its own predicted features); pass@1 through the sandboxed HumanEval runner. Lower "
        "bound: the uncut answer stopped at N tokens.",
        "same_prefix (ours only, not a pass@1): the mean share (%) of the uncut answer that "
        "the answer cut at N reproduces before its first differing token; b_inf there: the "
        "other link profile's uncut answers against the first's (lossless: 100)."]))  # fmt: skip


def render_table_7(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                   out: Mapping[str, str]) -> None:  # fmt: skip
    table = table_7(_runs(inputs["runs"]), item, inputs["paper"][0])
    save_with_paper(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        "Formulas read as bytes at one byte per value (our payload is 8-bit). Ours per "
        f"message: a {p.HEADER.size}-byte frame header (client_framing); a verdict adds a "
        "2-byte token count, a flag and block count (2), 8 bytes per block shape and a "
        "float32 scale per row (server_framing_scales); exact = every message equals "
        "formula + those. MoA sends per verified position the LSA's mean over layers "
        "(2 E_kv values; the client applies LSA's output map) and the K/V of the last TLI "
        "layers (2 E_kv each); EAGLE the feature (E); Independent nothing.",
        "The first reply (the prompt's payload, no tokens) is gzip-compressed: "
        "first_reply_gzip_bytes for first_reply_rows rows."]))  # fmt: skip
