"""Assemble the pretraining corpus: general text, chat-rendered instructions, Python source."""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from kvspec.data.chat import format_chat
from kvspec.data.records import read_jsonl

# Test suites of the standard library are skipped: they are large and repetitive.
_SKIP_PARTS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


def dataset_documents(path: str | Path, kind: str) -> Iterator[str]:
    """Training documents of one normalized dataset: text as is, instructions as chats."""
    for rec in read_jsonl(path, kind):
        if kind == "text":
            yield rec["text"]
        elif kind == "instruction":
            yield format_chat(rec["prompt"], rec["response"])
        else:
            raise ValueError(f"{path}: kind {kind!r} cannot be pretraining data")


def python_stdlib_documents(max_bytes: int) -> Iterator[str]:
    """Python files of this interpreter's standard library, in sorted order, while they fit
    in max_bytes characters."""
    root = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for path in sorted(root.rglob("*.py")):
        if _SKIP_PARTS & set(path.relative_to(root).parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if total + len(text) > max_bytes:
            continue  # too large for what is left of the budget; smaller files may still fit
        total += len(text)
        yield text


def tokenize_documents(docs: list[str], tokenizer: Any, eos_id: int) -> np.ndarray:
    """All documents as one token stream (uint16/uint32), each followed by EOS."""
    dtype = np.uint16 if len(tokenizer) < 2**16 else np.uint32
    parts = []
    for i in tqdm(range(0, len(docs), 256), desc="tokenize", mininterval=5):
        for ids in tokenizer(docs[i : i + 256], add_special_tokens=False)["input_ids"]:
            parts.append(np.asarray(ids + [eos_id], dtype=dtype))
    return np.concatenate(parts)


def split_stream(
    tokens: np.ndarray, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Hold out `val_fraction` of the stream as contiguous blocks chosen with `seed`."""
    n_blocks = 100
    blocks = np.array_split(tokens, n_blocks)
    rng = np.random.default_rng(seed)
    n_val = max(1, round(val_fraction * n_blocks))
    val_idx = set(rng.choice(n_blocks, size=n_val, replace=False).tolist())
    train = np.concatenate([b for i, b in enumerate(blocks) if i not in val_idx])
    val = np.concatenate([b for i, b in enumerate(blocks) if i in val_idx])
    return train, val


def sample_documents(docs: list[str], max_chars: int, seed: int) -> list[str]:
    """A seeded random subset of `docs` totalling at most `max_chars` characters."""
    order = np.random.default_rng(seed).permutation(len(docs))
    picked, total = [], 0
    for i in order:
        if total + len(docs[i]) > max_chars:
            continue
        picked.append(docs[i])
        total += len(docs[i])
    return picked


def assemble(sources: dict[str, tuple[str, str]], stdlib_bytes: int) -> list[dict[str, str]]:
    """Corpus records {id, text, source}: each dataset (path, kind) in order, then stdlib code."""
    records = []
    for name, (path, kind) in sources.items():
        records += [
            {"id": f"{name}/{i}", "text": d, "source": name}
            for i, d in enumerate(dataset_documents(path, kind))
        ]
    records += [
        {"id": f"python_stdlib/{i}", "text": d, "source": "python_stdlib"}
        for i, d in enumerate(python_stdlib_documents(stdlib_bytes))
    ]
    return records
