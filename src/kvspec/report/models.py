"""Report item: the models of this scale — role, architecture, size, where the weights came
from (pretrained here, distilled here, a packaged GGUF, or the hub) and what that changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from kvspec.report.tables import write_table

SOURCE_NOTES = {
    "gguf": "4-bit-quantized GGUF weights dequantized to float32 (a substitution for the "
    "documents' bf16 models; quantization error is part of every number measured with it)",
    "pretrain": "pretrained here on the study's small corpus (a stand-in, not the documents' "
    "model)",
    "distil": "distilled here from its teacher (shares the teacher's tokenizer)",
    "hub": "the documents' own model, from the Hugging Face hub",
}


def model_row(row: dict[str, Any]) -> dict[str, Any]:
    """One model directory as a table row (config.json, and source.json when packaged)."""
    directory = Path(row["dir"])
    config = json.loads((directory / "config.json").read_text())
    source_file = directory / "source.json"
    source = json.loads(source_file.read_text()) if source_file.is_file() else {}
    heads = (config.get("num_attention_heads"), config.get("num_key_value_heads"))
    return {
        "model": row["model"],
        "role": row["role"],
        "architecture": (config.get("architectures") or ["?"])[0],
        "layers": config.get("num_hidden_layers"),
        "heads (q/kv)": f"{heads[0]}/{heads[1]}",
        "vocab": config.get("vocab_size"),
        "parameters": source.get("parameters"),
        "source": row["source"],
        "weights": source.get("quantization", ""),
        "package": ", ".join(f"{k}=={v}" for k, v in source.get("packages", {}).items()),
        "note": SOURCE_NOTES[row["source"]] + _started_from(row.get("start")),
    }


def _started_from(start: str | None) -> str:
    """A distilled model's start (`distil.start`): which trained draft its weights began as."""
    return f"; started from the trained draft `{start}`, its shared layers kept" if start else ""


def render(item: dict[str, Any], inputs: dict[str, list[str]], outputs: dict[str, str]) -> None:
    """The models table of `item["rows"]` ({model, role, source, start, dir})."""
    df = pd.DataFrame([model_row(r) for r in item["rows"]])
    notes = ["Roles: the documents' model each one stands in for at this scale."]
    write_table(df, outputs["csv"], outputs["md"], "Models used at this scale", notes)
