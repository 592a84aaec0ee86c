"""A healed MLA target with infini-gram drafting beside its GQA original at long contexts
(rule specdecode_mla; beyond the documents): one table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.report.tables import write_table

GREEDY = "greedy"


def mla_table(record: dict[str, Any]) -> pd.DataFrame:
    """Per context, model and method (the measured order): summed over the prompts."""
    rows = pd.DataFrame(record["rows"])
    rows["n_tokens"] = rows["tokens"].map(len)
    keys = ["context", "model", "method"]
    g = rows.groupby(keys, sort=False)
    out = g.agg(prompts=("prompt", "size"), prefill_s=("prefill_seconds", "mean"),
                cache_kb_per_token=("cache_bytes_per_token", "mean"),
                tokens=("n_tokens", "sum"), seconds=("decode_seconds", "sum"),
                steps=("steps", "sum"), exact=("exact", "sum"),
                prefix_share_vs_gqa_greedy=("prefix_share", "mean")).reset_index()  # fmt: skip
    out["cache_kb_per_token"] /= 1024
    out["tok_s"] = out["tokens"] / out["seconds"]
    out["tokens_per_step"] = out["tokens"] / out["steps"]
    greedy = out[out["method"] == GREEDY].set_index(["context", "model"])["tok_s"]
    own = [greedy[c, m] for c, m in zip(out["context"], out["model"], strict=True)]
    out["vs_own_greedy"] = out["tok_s"] / own
    gqa = out[out["method"] == GREEDY].groupby("context")["tok_s"].first()  # the first model
    out["vs_gqa_greedy"] = out["tok_s"] / out["context"].map(gqa)
    out["exact"] = out["exact"].astype(int).astype(str) + " of " + out["prompts"].astype(str)
    columns = ["context", "model", "method", "prompts", "cache_kb_per_token", "prefill_s",
               "tok_s", "vs_own_greedy", "vs_gqa_greedy", "tokens_per_step", "exact",
               "prefix_share_vs_gqa_greedy"]  # fmt: skip
    return out[columns]


def notes(record: dict[str, Any], bench: dict[str, Any]) -> list[str]:
    s = record["settings"]
    label = bench.get("label") or bench["name"]
    return [
        f"Beyond the documents: the thesis's chapters 3 and 4 together. Measured here in one "
        f"process ({record['cpu']}, {record['threads']} threads, {s['device']}, {s['dtype']}). "
        f"Each prompt is one of the first {bench['n']} {label} questions after a conversation "
        "history of the GQA target's own answers to index prompts (seeded order), cut on the "
        "left to the context length; each model prefills it once (prefill_s) and decodes "
        f"{s['max_new_tokens']} tokens with every method from that cache (cropped back between "
        "runs), the models interleaved prompt by prompt after one discarded warm-up.",
        "The MLA model is the configured Table 3.3 row at its last healing budget in DeepSeek-V3 "
        "layout, decoding over its latent cache (kvspec.models.deepseek_absorbed); its drafter "
        "reads the GQA target's response index, as the GQA model's does. tok_s = tokens / "
        "decode seconds (draft + verify, prefill excluded); greedy is the same loop with a "
        "drafter that never drafts. exact: runs whose tokens equal the same model's greedy "
        "tokens. prefix_share_vs_gqa_greedy: common prefix with the GQA model's greedy output, "
        "as a share of the shorter output (how far the converted model's text follows the "
        "original's, which bounds how well an index of the original's answers drafts for it).",
        "cache_kb_per_token: bytes measured on the real cache after the prefill / 1024.",
        "No paper numbers: neither chapter measures this combination.",
    ]


def render(item: dict, inputs: dict[str, list[str]], outputs: dict[str, str]) -> None:
    record = read_json(inputs["runs"][0])
    title = "CARE-converted (healed, absorbed MLA) target with infini-gram drafting vs GQA"
    write_table(mla_table(record), outputs["csv"], outputs["md"], title,
                notes(record, item["bench"]))  # fmt: skip
