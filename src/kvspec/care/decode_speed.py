"""Decode speed of the original GQA model vs its MLA conversions at long contexts (issue 13).

All models are loaded into one process and measured in interleaved rounds (round r: every
model at every context), so machine load affects them alike. Per (model, context): one prefill
of a seeded random prompt, then `repeats` greedy decodes of `new_tokens` tokens, each after
cropping the cache back to the prompt; tokens/s is the median over repeats (prefill excluded).
The cache bytes per token are measured on the real cache after the prefill.
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm
from transformers import DynamicCache

from kvspec.care.pipeline import kv_cache_widths
from kvspec.decoding.packed import pack_linears
from kvspec.io import write_json
from kvspec.models.deepseek_absorbed import absorb
from kvspec.models.load import check_positions, load_model, use_threads
from kvspec.provenance import provenance

log = logging.getLogger(__name__)


@dataclass
class Prefilled:
    """A model's cache after the prompt, and the logits of its last position."""

    cache: DynamicCache
    logits: torch.Tensor  # (1, vocab)
    length: int


def cache_bytes(cache: DynamicCache) -> int:
    """Bytes held by every layer's cached tensors."""
    return sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
    )


@torch.no_grad()
def prefill(model: torch.nn.Module, prompt: torch.Tensor) -> Prefilled:
    cache = DynamicCache(config=model.config)
    out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return Prefilled(cache, out.logits[:, -1], prompt.shape[1])


@torch.no_grad()
def decode_seconds(model: torch.nn.Module, state: Prefilled, new_tokens: int) -> float:
    """Seconds for `new_tokens` greedy steps after the prompt; the cache is cropped back after."""
    logits = state.logits
    _synchronize(logits.device)
    start = time.perf_counter()
    for _ in range(new_tokens):
        nxt = logits.argmax(-1, keepdim=True)  # (1, 1)
        logits = model(input_ids=nxt, past_key_values=state.cache, use_cache=True).logits[:, -1]
    _synchronize(logits.device)
    seconds = time.perf_counter() - start
    state.cache.crop(state.length - state.cache.get_seq_length())  # negative: tokens to drop
    return seconds


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    models: dict[str, torch.nn.Module],
    contexts: list[int],
    new_tokens: int,
    repeats: int,
    vocab: int,
    seed: int,
) -> list[dict[str, Any]]:
    """One row per (model, context): median decode tok/s, its spread, cache bytes per token."""
    gen = torch.Generator().manual_seed(seed)
    device = next(iter(models.values())).device
    prompts = {c: torch.randint(0, vocab, (1, c), generator=gen).to(device) for c in contexts}
    seconds: dict[tuple[str, int], list[float]] = {(m, c): [] for m in models for c in contexts}
    per_token: dict[tuple[str, int], float] = {}
    bar = tqdm(total=len(seconds) * repeats, desc="decode speed", mininterval=10)
    for context in contexts:  # one context's caches at a time bounds memory
        states = {name: prefill(model, prompts[context]) for name, model in models.items()}
        for name, state in states.items():
            per_token[name, context] = cache_bytes(state.cache) / context
        for _ in range(repeats):
            for name, model in models.items():
                seconds[name, context].append(decode_seconds(model, states[name], new_tokens))
                bar.update()
        del states
    bar.close()
    return [
        {
            "model": name,
            "context": context,
            "tok_s": new_tokens / statistics.median(times),
            "spread": (max(times) - min(times)) / statistics.median(times),
            "cache_bytes_per_token": per_token[name, context],
        }
        for (name, context), times in seconds.items()
    ]


def decode_speed_stage(
    models: dict[str, str],
    out_path: str,
    *,
    contexts: list[int],
    new_tokens: int,
    repeats: int,
    seed: int,
    device: str = "cpu",
    dtype: str = "float32",
    linear: str = "torch",
    threads: int | None = None,
    restored: Mapping[str, Any] | None = None,
) -> None:
    """Measure every model directory in `models` ({label: dir}, the GQA original first; a
    DeepSeek-V3-layout model decodes with `kvspec.models.deepseek_absorbed`); rows
    carry tok/s and cache bytes relative to the first model at the same context, and the
    numbers per token the architecture needs (`layout_numbers_per_token`) beside the bytes
    measured on the real cache. `restored` ({label, source, stats, settings, opts}) adds,
    last, a full MLA restoration of `source` (`kvspec.care.heal_stages.save_restoration`):
    the model heal_restore saves for healing, rebuilt here so that it need not stay on disk
    (bit for bit at the same thread count; float32 round-off apart otherwise)."""
    use_threads(threads)
    with tempfile.TemporaryDirectory(prefix="kvspec-restored-") as tmp:
        dirs = dict(models)
        if restored:
            from kvspec.care.heal_stages import save_restoration

            save_restoration(restored["source"], restored["stats"], restored["settings"],
                             restored["opts"], Path(tmp))  # fmt: skip
            dirs[restored["label"]] = tmp
        loaded, layout, vocab, absorbed = _load_all(dirs, contexts, new_tokens, dtype, device,
                                                    linear)  # fmt: skip
    rows = measure(loaded, contexts, new_tokens, repeats, vocab, seed)
    base = next(iter(models))
    ref = {r["context"]: r for r in rows if r["model"] == base}
    for row in rows:
        ref_row = ref[row["context"]]
        row["layout_numbers_per_token"] = layout[row["model"]]
        row["absorbed"] = absorbed[row["model"]]
        row["vs_gqa"] = row["tok_s"] / ref_row["tok_s"]
        row["cache_vs_gqa"] = row["cache_bytes_per_token"] / ref_row["cache_bytes_per_token"]
        log.info(
            "%s @ %d: %.2f tok/s (%.2fx GQA), %.0f cache bytes/token",
            *(row[k] for k in ("model", "context", "tok_s", "vs_gqa", "cache_bytes_per_token")),
        )
    settings = {"contexts": contexts, "new_tokens": new_tokens, "repeats": repeats, "seed": seed,
                "device": device, "dtype": dtype}  # fmt: skip
    record = provenance(settings, models=models, restored=restored)
    write_json(out_path, {**record, "settings": settings, "rows": rows})


def _load_all(models: Mapping[str, str], contexts: list[int], new_tokens: int, dtype: str,
              device: str, linear: str) -> tuple[dict, dict, int, dict]:  # fmt: skip
    """Every model of {label: dir} loaded for decoding: (models, cached numbers per token,
    vocabulary size, whether each decodes absorbed)."""
    loaded, layout, vocab = {}, {}, None
    absorbed = {}
    for label, path in models.items():
        loaded[label], tok = load_model(path, dtype=dtype, device=device)
        absorbed[label] = absorb(loaded[label]) > 0  # DeepSeek-V3 layout: decode in the latent
        pack_linears(loaded[label], linear)  # after absorbing: the engine packs final weights
        layout[label] = kv_cache_widths(loaded[label])["cached"]
        vocab = vocab or len(tok)
        check_positions(label, loaded[label].config, max(contexts) + new_tokens,
                        "care.decode_speed.contexts")  # fmt: skip
    return loaded, layout, vocab, absorbed
