"""Benchmark of the CARE pipeline on one model, printed side by side (not a test).

    python -m kvspec.care.bench --model results/models/target --data results/data/alpaca.jsonl

1. wall time of each stage (calibration + covariance, factorization per method, water-filling,
   conversion, save_pretrained, one small lm-eval run);
2. KV-cache bytes per token, GQA vs MLA at each rank: from the configs and measured on a real
   cache after a prefill;
3. greedy decode tokens/s at a long context (default 2k), GQA vs MLA at each rank: the same
   prompt for every model, one warm-up run discarded, median of repeats, same thread count.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from kvspec.care.allocate import waterfill_ranks
from kvspec.care.calibration import batches, calibration_tokens
from kvspec.care.convert import full_factors, max_rank, mla_from_factors, split_kv
from kvspec.care.covariance import collect_covariances
from kvspec.care.store import spectra
from kvspec.care.vocabulary import FACTORIZATIONS
from kvspec.models.load import load_model


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(result, seconds) of one call."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def cache_bytes_per_token(model: torch.nn.Module, ids: torch.Tensor) -> float:
    """Bytes held by the KV cache after a prefill of `ids` (1, T), divided by T."""
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    total = sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
    )
    return total / ids.shape[1]


@torch.no_grad()
def decode_tokens_per_s(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int) -> float:
    """Greedy decode speed after prefilling `prompt` (1, T); prefill time excluded."""
    cache = DynamicCache(config=model.config)
    logits = model(input_ids=prompt, past_key_values=cache, use_cache=True).logits[:, -1]
    start = time.perf_counter()
    for _ in range(new_tokens):
        nxt = logits.argmax(-1, keepdim=True)  # (1, 1)
        logits = model(input_ids=nxt, past_key_values=cache, use_cache=True).logits[:, -1]
    return new_tokens / (time.perf_counter() - start)


def median_speed(model: torch.nn.Module, prompt: torch.Tensor, new: int, repeats: int) -> float:
    decode_tokens_per_s(model, prompt[:, :64], 4)  # warm-up, discarded
    return statistics.median(decode_tokens_per_s(model, prompt, new) for _ in range(repeats))


def stage_times(model, tok, data: str, n: int, t: int, rank: int) -> tuple[dict, list, dict]:
    """Time calibration, factorization (each method), water-filling and conversion."""
    times: dict[str, float] = {}
    ids, times["calibration tokens"] = timed(
        lambda: calibration_tokens(data, "instruction", tok, n, t, 0)
    )
    stats, times["covariance"] = timed(
        lambda: collect_covariances(model, list(batches(ids, 16)), progress=False)
    )
    factors = {}
    for method in FACTORIZATIONS:
        factors[method], times[f"factorize {method}"] = timed(
            lambda m=method: full_factors(model, m, stats)
        )
    width = max_rank(model.config)
    spec = spectra(factors["care"])
    ranks, times["water-filling"] = timed(lambda: waterfill_ranks(spec, len(spec) * rank, width))
    mla, times["convert"] = timed(
        lambda: mla_from_factors(model, factors["care"], *split_kv(ranks))
    )
    with tempfile.TemporaryDirectory() as tmp:
        _, times["save_pretrained"] = timed(lambda: mla.save_pretrained(Path(tmp) / "m"))
    return times, factors["care"], {"mla": mla}


def lmeval_time(model, tok, task_dir: Path, data_dir: Path) -> float | None:
    """Seconds of one lm-eval run (ARC-Challenge, 50 documents), if the data exist."""
    from kvspec.eval.harness import TaskSpec, evaluate

    data = data_dir / "arc_challenge.jsonl"
    if not data.is_file():
        return None
    spec = {"arc": TaskSpec("acc", "kvspec_arc_challenge", str(data), limit=50)}
    _, seconds = timed(lambda: evaluate(model, tok, spec, task_dir, batch_size=16))
    return seconds


def _row(name: str, *cells: Any) -> str:
    return f"{name:<24}" + "".join(f"{c:>18}" for c in cells)


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model)
    width, layers = max_rank(model.config), model.config.num_hidden_layers
    ranks = sorted({max(1, round(f * width)) for f in args.fractions})
    times, care, _ = stage_times(model, tok, args.data, args.n_samples, args.seq_len, ranks[0])
    task_dir = Path(__file__).resolve().parents[3] / "config" / "lm_eval_tasks"
    times["lm-eval (ARC, 50 docs)"] = lmeval_time(model, tok, task_dir, Path(args.data).parent)
    print(f"\n== stage times on {args.model} ({args.threads} threads)")
    for name, seconds in times.items():
        print(_row(name, "n/a" if seconds is None else f"{seconds:.2f} s"))
    prompt = torch.randint(0, len(tok), (1, args.context - args.new_tokens),
                           generator=torch.Generator().manual_seed(0))  # fmt: skip
    gqa_bytes = cache_bytes_per_token(model, prompt[:, :128])
    gqa_speed = median_speed(model, prompt, args.new_tokens, args.repeats)
    print(f"\n== KV cache and decode speed, context {args.context}, L={layers}, g_h·d_h={width}")
    print(
        _row("model", "bytes/token cfg", "bytes/token meas", "KV save %", "decode tok/s", "vs GQA")
    )
    elem = next(model.parameters()).element_size()
    print(_row("GQA (original)", 2 * layers * width * elem, f"{gqa_bytes:.0f}", "0.00",
               f"{gqa_speed:.1f}", "1.00x"))  # fmt: skip
    spec = spectra(care)
    for r in ranks:
        alloc = waterfill_ranks(spec, len(spec) * r, width)
        mla = mla_from_factors(model, care, *split_kv(alloc))
        measured = cache_bytes_per_token(mla, prompt[:, :128])
        speed = median_speed(mla, prompt, args.new_tokens, args.repeats)
        cells = [sum(alloc) * elem, f"{measured:.0f}", f"{100 * (1 - r / width):.2f}"]
        print(_row(f"MLA CARE-E r={r}", *cells, f"{speed:.1f}", f"{speed / gqa_speed:.2f}x"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="results/models/target", help="GQA model directory")
    p.add_argument("--data", default="results/data/alpaca.jsonl", help="calibration JSONL")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.0625, 0.125, 0.25, 0.5])
    p.add_argument("--n-samples", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--context", type=int, default=2048, help="tokens in the cache when decoding")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    run(p.parse_args(argv))


if __name__ == "__main__":
    main()
