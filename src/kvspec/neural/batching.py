"""Document 002's Figure 4 on CPU: throughput against batch size under continuous batching,
for plain greedy decoding, the n-gram drafter and the trained heads, all chain drafting
(`kvspec.decoding.batch_spec.SpecBatch`; the document ran vLLM without tree drafting).

Every method serves the same requests (the first n prompts of one set, all arriving at once,
each `new_tokens` long) with at most `slots` rows at a time, the methods interleaved per batch
size after one untimed warm-up each. Each request's tokens are compared with its plain greedy
decoding alone (`greedy_generate`, batch 1): batched float32 forwards may flip a near-tied
argmax, so `same_as_alone` counts the requests whose tokens agree.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tqdm import tqdm

from kvspec.data.records import read_jsonl
from kvspec.decoding.batch_spec import SpecBatch
from kvspec.decoding.generate import stop_ids
from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.prompts import bench_prompts
from kvspec.io import write_json
from kvspec.lecture.scheduler import Request, run
from kvspec.models.load import load_model, use_threads
from kvspec.provenance import provenance

log = logging.getLogger(__name__)

Factory = tuple[Callable[[], Any] | None, int]  # (a new drafter per request, draft depth)


def serve(target: torch.nn.Module, prompts: Sequence[list[int]], new_tokens: int, slots: int,
          factory: Factory) -> dict[str, Any]:  # fmt: skip
    """One run: every prompt served by continuous batching; throughput and counters."""
    requests = [Request(i, list(ids), new_tokens) for i, ids in enumerate(prompts)]
    batch = SpecBatch(target, *factory)
    t0 = time.perf_counter()
    finished, batch = run(target, requests, slots, "continuous", batch=batch)
    seconds = time.perf_counter() - t0
    tokens = sum(len(f.tokens) for f in finished)
    return {
        "slots": slots, "requests": len(finished), "tokens": tokens, "seconds": seconds,
        "tok_s": tokens / seconds, "steps": batch.steps, "row_steps": batch.row_steps,
        "row_drafts": batch.row_drafts, "drafted": batch.drafted, "accepted": batch.accepted,
        "draft_seconds": batch.draft_seconds, "verify_seconds": batch.verify_seconds,
        "outputs": [f.tokens for f in finished],
    }  # fmt: skip


def measure(
    target: torch.nn.Module,
    prompts: Sequence[list[int]],
    new_tokens: int,
    slot_counts: Sequence[int],
    factories: Mapping[str, Factory],
) -> list[dict[str, Any]]:
    """Rows per (batch size, method), after one untimed warm-up of every method."""
    alone = [greedy_generate(target, ids, new_tokens) for ids in prompts]
    for factory in factories.values():
        serve(target, prompts[:1], min(4, new_tokens), 1, factory)  # warm-up
    rows = []
    total = len(slot_counts) * len(factories)
    with tqdm(total=total, desc="batched runs", unit="run", mininterval=10) as bar:
        for slots in slot_counts:
            for name, factory in factories.items():
                row = serve(target, prompts, new_tokens, slots, factory)
                row["same_as_alone"] = sum(o == a for o, a in zip(row.pop("outputs"), alone,
                                                                   strict=True))  # fmt: skip
                rows.append({"method": name, **row})
                log.info("%s at %d slots: %.2f tok/s, accepted %d of %d drafted, %d of %d "
                         "requests as alone", name, slots, row["tok_s"], row["accepted"],
                         row["drafted"], row["same_as_alone"], row["requests"])  # fmt: skip
                bar.update()
    return rows


def _ngram(name: str, setup: Any) -> Factory:
    from kvspec.ngram.methods import make_drafter

    return (lambda: make_drafter(name, setup)[0]), make_drafter(name, setup)[1]  # its own depth


def _head(head: torch.nn.Module, kind: str, target: torch.nn.Module, k: int) -> Factory:
    from kvspec.neural.heads import make_drafter

    return (lambda: make_drafter(kind, head, target, None)), k


def batching_stage(
    inputs: Mapping[str, str],
    out_path: str,
    *,
    model: str,
    drafters: Sequence[str],
    baselines: Sequence[str],
    bench: Mapping[str, Any],
    new_tokens: int,
    slots: Sequence[int],
    chain_k: int,
    decode: Mapping[str, Any],
    max_support: int,
    device: str,
    dtype: str,
    linear: str,
    seed: int,
    threads: int,
) -> None:
    """Greedy, the chain n-gram `baselines` and every head of `drafters` (chain, depth
    `chain_k`) at every batch size of `slots` (`inputs`: `model`, `prompts`, `head_<drafter>`,
    the baselines' indexes)."""
    from kvspec.neural.heads import load_head
    from kvspec.ngram.methods import DecodeSettings, Setup, input_indexes, open_engines

    use_threads(threads)
    target, tokenizer = load_model(inputs["model"], dtype=dtype, device=device, linear=linear)
    setup = Setup(target, stop_ids(target, tokenizer), new_tokens,
                  DecodeSettings.from_config(decode), seed=seed,
                  engines=open_engines(input_indexes(inputs), max_support))  # fmt: skip
    factories: dict[str, Factory] = {"greedy": (None, 0)}
    factories |= {name: _ngram(name, setup) for name in baselines}
    for name in drafters:
        head, decl = load_head(inputs[f"head_{name}"], target)
        factories[name] = _head(head, decl["kind"], target, chain_k)
    prompts = [ids for _, ids in bench_prompts(read_jsonl(inputs["prompts"]), bench, tokenizer)]
    rows = measure(target, prompts, new_tokens, slots, factories)
    settings = {"model": model, "drafters": list(drafters), "baselines": list(baselines),
                "bench": dict(bench), "new_tokens": new_tokens, "slots": list(slots),
                "chain_k": chain_k, "device": device, "dtype": dtype}  # fmt: skip
    write_json(out_path, {**provenance(settings), "settings": settings, "rows": rows})
