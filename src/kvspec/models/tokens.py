"""Turn the pretraining corpus into train/validation token streams."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from transformers import AutoTokenizer

from kvspec.data.records import read_jsonl
from kvspec.io import atomic_path
from kvspec.models.corpus import split_stream, tokenize_documents
from kvspec.seeds import derive, numpy_generator


def save_array(path: str | Path, array: np.ndarray) -> None:
    """np.save, atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, array)


def token_streams(
    corpus: str | Path, tokenizer_dir: str | Path, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Tokenize the corpus and split it into (train, val) streams, with counts per source."""
    records = read_jsonl(corpus, "text")
    # the corpus is written source by source: shuffle documents first (seeded) so that the
    # held-out blocks sample every source, not one or two
    order = numpy_generator(seed, "corpus order").permutation(len(records))
    records = [records[i] for i in order]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokens = tokenize_documents([r["text"] for r in records], tokenizer, tokenizer.eos_token_id)
    train, val = split_stream(tokens, val_fraction, derive(seed, "validation blocks"))
    chars = sum(len(r["text"]) for r in records)
    by_source: dict[str, int] = {}
    for r in records:
        by_source[r["source"]] = by_source.get(r["source"], 0) + len(r["text"])
    stats = {
        "documents": len(records),
        "characters": chars,
        "tokens": int(len(tokens)),
        "train_tokens": int(len(train)),
        "val_tokens": int(len(val)),
        "chars_per_token": chars / len(tokens),
        "characters_by_source": by_source,
    }
    return train, val, stats
