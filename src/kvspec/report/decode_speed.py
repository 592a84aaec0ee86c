"""MLA vs GQA decode speed and cache per token (rule convert_decode_speed): one table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.report.tables import write_table

COLUMNS = ["model", "context", "tok_s", "vs_gqa", "spread", "cache_bytes_per_token",
           "cache_vs_gqa", "layout_numbers_per_token", "absorbed"]  # fmt: skip


def decode_speed_table(record: dict[str, Any]) -> pd.DataFrame:
    """Rows by context, then in the measured order of models (the original first)."""
    df = pd.DataFrame(record["rows"]).reindex(columns=COLUMNS)  # older records: no "absorbed"
    return df.sort_values("context", kind="stable").reset_index(drop=True)


def notes(record: dict[str, Any]) -> list[str]:
    s = record["settings"]
    return [
        f"Measured here in one process ({record['cpu']}, {record['threads']} threads, "
        f"{s['device']}, {s['dtype']}): per model and context one prefill of a seeded random "
        f"prompt, then {s['repeats']} greedy decodes of {s['new_tokens']} tokens interleaved "
        "across models; tok_s is the median (prefill excluded), spread = (max - min) / median.",
        "cache_bytes_per_token is measured on the real cache after the prefill; "
        "layout_numbers_per_token is what the architecture needs per token (summed over "
        "layers). absorbed: the restored DeepSeek-V3 checkpoint decodes over its latent cache "
        "(kvspec.models.deepseek_absorbed: W_UK folded into the query, W_UV applied after "
        "attention); transformers' reference modeling would rebuild every head's K and V from "
        "the latent at each step. The CARE conversion (RoPE on the whole key) cannot fold W_UK "
        "into the query, so it rebuilds its keys from the latent at every step and folds only "
        "W_UV (kvspec.models.modeling_mla).",
        "No paper numbers: the thesis reports no decode speeds for CARE.",
    ]


def render(item: dict, inputs: dict[str, list[str]], outputs: dict[str, str]) -> None:
    record = read_json(inputs["speed"][0])
    title = f"MLA vs GQA decode speed, `{item['model']}`"
    write_table(decode_speed_table(record), outputs["csv"], outputs["md"], title, notes(record))
