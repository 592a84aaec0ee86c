"""Latency, throughput and batch size at decode, and time to first token vs prompt length.

The lecture's model (section 1.7): a decode step reads the weights once and every sequence's
KV cache, so L(B) = (M_params + B·M_KV) / bandwidth and throughput B / L(B) grows almost
linearly while the weights dominate. Here both are measured on a real model and cache: a
batch of B seeded random prompts of `context` tokens is prefilled, then greedy decode steps
are timed (median); TTFT is the time of one prefill of P tokens at batch 1 (median of repeats).
The lecture's prediction, with the bandwidth measured on this machine, is kept beside it.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from tqdm import tqdm
from transformers import DynamicCache


def cache_bytes(cache: DynamicCache) -> int:
    """Bytes held by every layer's cached tensors."""
    return sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
    )


def parameter_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@torch.inference_mode()
def decode_steps(
    model: torch.nn.Module, batch: int, context: int, steps: int, gen: torch.Generator
) -> tuple[list[float], int]:
    """Seconds of each of `steps` greedy decode steps of a batch after a `context`-token
    prefill, and the cache bytes per sequence after the prefill."""
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, context), generator=gen).to(model.device)  # (B, C)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    per_sequence = cache_bytes(cache) // batch
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        times.append(time.perf_counter() - start)
    return times, per_sequence


@torch.inference_mode()
def prefill_seconds(model: torch.nn.Module, length: int, gen: torch.Generator) -> float:
    """Wall time from a `length`-token prompt to the first generated token (batch 1)."""
    ids = torch.randint(0, model.config.vocab_size, (1, length), generator=gen).to(model.device)
    start = time.perf_counter()
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    out.logits[:, -1].argmax(-1)
    return time.perf_counter() - start


def batch_rows(model: torch.nn.Module, batch_sizes: list[int], context: int, steps: int,
               bandwidth: float, seed: int) -> list[dict[str, Any]]:  # fmt: skip
    """One row per batch size: measured step latency and throughput beside L(B) predicted
    from the weights' and caches' bytes and `bandwidth` (bytes/s)."""
    gen = torch.Generator().manual_seed(seed)
    weights = parameter_bytes(model)
    rows = []
    for b in tqdm(batch_sizes, desc="decode batch sizes", mininterval=5):
        times, kv = decode_steps(model, b, context, steps + 1, gen)
        step = statistics.median(times[1:])  # the first step after a prefill is a warm-up
        predicted = (weights + b * kv) / bandwidth
        rows.append({"B": b, "context": context, "step_ms": 1e3 * step, "tok_s": b / step,
                     "kv_bytes_per_sequence": kv, "weight_bytes": weights,
                     "predicted_step_ms": 1e3 * predicted, "predicted_tok_s": b / predicted,
                     "spread": (max(times[1:]) - min(times[1:])) / step})  # fmt: skip
    return rows


def ttft_rows(model: torch.nn.Module, lengths: list[int], repeats: int,
              seed: int) -> list[dict[str, Any]]:  # fmt: skip
    """One row per prompt length: median time to first token and prefill tokens/s."""
    gen = torch.Generator().manual_seed(seed)
    prefill_seconds(model, min(lengths), gen)  # warm-up
    rows = []
    for length in tqdm(lengths, desc="prefill lengths", mininterval=5):
        seconds = statistics.median(prefill_seconds(model, length, gen) for _ in range(repeats))
        rows.append({"prompt_tokens": length, "ttft_ms": 1e3 * seconds,
                     "prefill_tok_s": length / seconds})  # fmt: skip
    return rows
