"""The tiny seeded teacher and records that the distillation and calibration tests share."""

from __future__ import annotations

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
