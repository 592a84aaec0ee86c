"""Calibration batches: N windows of T tokens drawn (seeded) from one normalized dataset.

Text records are used as they are; instruction records are rendered with the tokenizer's chat
template (the format the model was trained on). Documents are taken in a seeded random order,
joined into one EOS-separated token stream, and cut into consecutive windows of T tokens, so
each window is real running text and no token is reused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from kvspec.data.records import read_jsonl
from kvspec.seeds import python_random

CALIBRATION_KINDS = ("text", "instruction")


def render_record(record: dict[str, Any], kind: str, tokenizer: Any) -> str:
    """One record as the model would read it (chat-rendered for instructions)."""
    if kind == "text":
        return record["text"]
    if kind != "instruction":
        raise ValueError(f"dataset kind {kind!r} cannot calibrate; use one of {CALIBRATION_KINDS}")
    messages = [
        {"role": "user", "content": record["prompt"]},
        {"role": "assistant", "content": record["response"]},
    ]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False)
    return f"{record['prompt']}\n{record['response']}"


def calibration_tokens(
    path: str | Path, kind: str, tokenizer: Any, n_samples: int, seq_len: int, seed: int
) -> Tensor:
    """(n_samples, seq_len) token ids from the dataset at `path` (seeded document order)."""
    if n_samples < 1 or seq_len < 2:
        raise ValueError(f"need n_samples >= 1 and seq_len >= 2, got {n_samples}, {seq_len}")
    need = n_samples * seq_len
    stream = token_stream(path, kind, tokenizer, need, seed)
    if len(stream) < need:
        raise ValueError(
            f"{path}: {len(stream)} tokens, but {n_samples} samples x {seq_len} tokens "
            f"= {need} are needed; lower n_samples/seq_len or use a larger dataset"
        )
    return torch.tensor(stream[:need], dtype=torch.long).view(n_samples, seq_len)


def token_stream(
    path: str | Path, kind: str, tokenizer: Any, max_tokens: int, seed: int
) -> list[int]:
    """EOS-separated token ids of the dataset's records in seeded random order, stopping once
    `max_tokens` are reached (the stream may be longer by the tail of the last record)."""
    records = list(read_jsonl(path, kind))
    python_random(seed, "calibration order").shuffle(records)
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    for rec in records:
        stream += tokenizer(render_record(rec, kind, tokenizer), add_special_tokens=False)[
            "input_ids"
        ]
        stream += [eos] if eos is not None else []
        if len(stream) >= max_tokens:
            break
    return stream


def batches(tokens: Tensor, batch_size: int) -> Iterator[Tensor]:
    """Consecutive row batches (B, T) of `tokens` (N, T)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for i in range(0, tokens.shape[0], batch_size):
        yield tokens[i : i + batch_size]
