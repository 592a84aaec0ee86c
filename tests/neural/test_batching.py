"""Figure 4's stage (kvspec.neural.batching): through the rule's entry point, greedy, an n-gram
drafter and saved heads serve the same requests at every batch size, each request's tokens
equal to its greedy decoding alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from kvspec.config import schema_defaults
from kvspec.models.build import build_model
from kvspec.models.tokenizer import train_tokenizer
from kvspec.neural.batching import batching_stage
from kvspec.neural.heads import build_head
from kvspec.ngram.index import build_index

TEXT = "def add(a, b): return a + b. the quick brown fox jumps over the lazy dog. " * 4
ARCH = {"family": "llama", "hidden": 64, "intermediate": 96, "layers": 3, "heads": 4,
        "kv_heads": 2, "max_position": 256}  # fmt: skip
HEADS = {
    "ours": {"kind": "moa", "tli": 1, "lsa_intermediate": 16, "sa_intermediate": 16,
             "ca_intermediate": 32},
    "eagle": {"kind": "eagle"},
}  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("batching")
    tok = train_tokenizer([TEXT] * 20, 300, 128)
    target = build_model(ARCH, tok, seed=0)
    target.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    inputs = {"model": str(root / "model")}
    torch.manual_seed(1)
    for name, decl in HEADS.items():
        head = build_head(target, decl)
        torch.save({"drafter": decl, "state": head.state_dict()}, root / f"{name}.pt")
        inputs[f"head_{name}"] = str(root / f"{name}.pt")
    questions = [{"task_id": f"t{i}", "prompt": f"def f{i}(x): return x + {i}"} for i in range(3)]
    (root / "humaneval.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    rng = np.random.default_rng(0)
    docs = [rng.integers(5, 290, 30).tolist() for _ in range(10)]
    build_index(docs, root / "index", vocab_size=len(tok), eos_token_id=tok.eos_token_id)
    (root / "index.json").write_text(
        json.dumps({"vocab_size": len(tok), "eos_token_id": tok.eos_token_id})
    )
    return inputs | {"prompts": str(root / "humaneval.jsonl"),
                     "index_target": str(root / "index"),
                     "index_target_stats": str(root / "index.json")}  # fmt: skip


@pytest.mark.parametrize("on", ["cpu", "second device"])
def test_every_method_and_batch_size_serves_every_request_exactly(
    on: str, files, tmp_path: Path, request
) -> None:
    """On the CPU and with the target and heads on a second torch device (the paper scale's
    GPU; tests/second_device.py)."""
    device = "cpu" if on == "cpu" else request.getfixturevalue("second_device")
    out = tmp_path / "batching.json"
    decode = schema_defaults("spec", "decode") | {"k": 3, "confidence": 0.0, "min_match": 1}
    bench = {"name": "humaneval", "prompts": "humaneval", "kind": "code", "n": 3}
    batching_stage(files, str(out), model="target", drafters=list(HEADS),
                   baselines=["sd_infgram_target", "sd_prompt_lookup"], bench=bench,
                   new_tokens=7, slots=[1, 2], chain_k=3, decode=decode, max_support=100,
                   device=device, dtype="float64", linear="torch", seed=0, threads=1)  # fmt: skip
    record = json.loads(out.read_text())
    rows = {(r["method"], r["slots"]): r for r in record["rows"]}
    methods = ["greedy", "sd_infgram_target", "sd_prompt_lookup", *HEADS]
    assert list(rows) == [(m, s) for s in (1, 2) for m in methods]
    for (method, _), row in rows.items():
        assert row["same_as_alone"] == row["requests"] == 3, method
        assert row["tokens"] == 21 and row["tok_s"] > 0
        assert row["accepted"] <= row["drafted"]
    assert rows["greedy", 1]["drafted"] == 0
    assert rows["greedy", 2]["steps"] < rows["greedy", 1]["steps"]  # two rows per step
    assert all(rows[m, 1]["drafted"] > 0 for m in HEADS)
    assert record["settings"]["slots"] == [1, 2] and record["config_hash"]
