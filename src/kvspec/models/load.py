"""Load any model of the study from its `save_pretrained` directory (one loader for all)."""

from __future__ import annotations

import os
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import kvspec.models.modeling_mla  # noqa: F401  (registers the MLA classes with the Auto API)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def use_threads(threads: int | None) -> None:
    """Compute with `threads` CPU threads (a rule's `threads:`); None keeps torch's default."""
    if threads is not None:
        torch.set_num_threads(threads)


def load_model(
    model_dir: str | os.PathLike[str], *, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """(model in eval mode on `device` in `dtype`, tokenizer) of a saved model directory."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype]).to(device)
    return model.eval(), AutoTokenizer.from_pretrained(model_dir)
