"""The tiny seeded teacher and records that the distillation and calibration tests share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kvspec.decoding.loop import greedy_generate

from ..tiny import tiny_llama

VOCAB = 48
HELD_OUT_TOKEN = VOCAB - 1  # appears only in held-out prompts


def confident_teacher() -> torch.nn.Module:
    """A random tiny Llama made confident (a scaled LM head), like a trained teacher; a flat
    random-init distribution would make its argmax and its KL pull the student apart."""
    model = tiny_llama(0, vocab=VOCAB, hidden=32, intermediate=64, double=False)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model


def distil_records(teacher: torch.nn.Module, n_index: int = 24, n_heldout: int = 4) -> list[dict]:
    """Index and held-out records with the teacher's greedy responses; only held-out prompts
    contain HELD_OUT_TOKEN."""
    rng = np.random.default_rng(0)
    records = []
    for i in range(n_index + n_heldout):
        split = "index" if i < n_index else "general"
        prompt = rng.integers(0, HELD_OUT_TOKEN, rng.integers(3, 10)).tolist()
        if split != "index":
            prompt[1] = HELD_OUT_TOKEN
        response = greedy_generate(teacher, prompt, 12)
        if split == "index" and HELD_OUT_TOKEN in response:  # keep the greedy prefix before it
            response = response[: response.index(HELD_OUT_TOKEN)]
        records.append({"id": f"p{i}", "split": split, "prompt_ids": prompt,
                        "response_ids": response})  # fmt: skip
    return records


def stage_teacher(tmp_path: Path, arch: dict[str, Any]) -> tuple[Any, Any, Path, Path]:
    """A tiny 2-layer teacher (32 wide) saved with its own tokenizer under
    tmp_path/models/target, and its greedy responses (5 index, 1 general prompts) in
    tmp_path/responses.jsonl: the files a distillation stage reads; (teacher, tokenizer,
    its directory, the responses file)."""
    from kvspec.decoding.generate import prompt_ids
    from kvspec.models.build import build_model
    from kvspec.models.tokenizer import train_tokenizer

    tok = train_tokenizer(["def f(x): return x + 1\n" * 20, "hello world " * 20], 300, 64)
    arch = {**arch, "hidden": 32, "intermediate": 64, "layers": 2, "heads": 4, "kv_heads": 2}
    teacher = build_model(arch, tok, seed=0).eval()
    teacher_dir = tmp_path / "models" / "target"
    teacher.save_pretrained(teacher_dir)
    tok.save_pretrained(teacher_dir)
    rows = []
    for i, text in enumerate(["def f", "hello", "return x", "world", "f(x)", "x + 1"]):
        ids = prompt_ids(tok, text)
        resp = greedy_generate(teacher, ids, 8, teacher.generation_config.eos_token_id)
        rows.append({"id": str(i), "split": "index" if i < 5 else "general", "prompt": text,
                     "prompt_ids": ids, "response_ids": resp})  # fmt: skip
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return teacher, tok, teacher_dir, responses
