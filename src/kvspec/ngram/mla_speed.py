"""The thesis's two chapters together (beyond the documents): a CARE-converted target, healed
and decoding in its latent cache (DeepSeek-V3 layout, `kvspec.models.deepseek_absorbed`), with
the thesis's infini-gram drafting, beside its GQA original with the same drafter, at long
contexts.

Each prompt is a benchmark question after a conversation history of the target's own earlier
answers (index prompts of `results/generate/<target>/responses.jsonl`, in a seeded order), cut
on the left so that the prompt holds exactly `context` tokens. Per prompt, every model is
prefilled once (timed) and then decodes with every method from that one cache, cropped back
after each run, the models interleaved prompt by prompt. Plain greedy decoding is the same
loop with a drafter that never drafts, so decode seconds (the steps' draft + verify time,
prefill excluded) compare like with like. A drafter is built afresh for every run, so each
model starts from the same drafter state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from kvspec.data.records import read_jsonl
from kvspec.decoding.cache import common_prefix, crop_to
from kvspec.decoding.generate import stop_ids
from kvspec.decoding.loop import prefill, speculative_generate
from kvspec.decoding.packed import pack_linears
from kvspec.decoding.prompts import bench_prompts
from kvspec.io import read_rows, write_json
from kvspec.lecture.batching import cache_bytes
from kvspec.models.deepseek_absorbed import absorb
from kvspec.models.load import check_positions, load_model, use_threads
from kvspec.provenance import provenance
from kvspec.seeds import numpy_generator

log = logging.getLogger(__name__)

GREEDY = "greedy"


class NoDrafter:
    """Drafts nothing: the speculative loop then is plain greedy decoding."""

    def propose(self, context: list[int], k: int) -> None:
        return None


@dataclass
class Decoded:
    """One method's run from a prefilled cache."""

    tokens: list[int]
    decode_seconds: float  # Σ draft + verify over the steps (prefill excluded)
    steps: int
    drafted: int
    accepted: int


def history_prompt(
    question: list[int], turns: Sequence[list[int]], context: int, order: np.ndarray
) -> list[int]:
    """`question` after whole history turns taken in `order`, cut on the left to `context`
    tokens in all."""
    room = context - len(question)
    if room < 0:
        raise ValueError(f"a question of {len(question)} tokens exceeds the context {context}")
    history: list[int] = []
    for i in order:
        if len(history) >= room:
            break
        history += turns[i]
    if len(history) < room:
        total = sum(map(len, turns))
        raise ValueError(f"the history turns hold {total} tokens; context {context} needs {room}")
    return history[len(history) - room :] + list(question)


def history_turns(records: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Each index prompt's chat-formatted prompt and the target's answer, as one turn."""
    turns = [
        list(r["prompt_ids"]) + list(r["response_ids"])
        for r in records
        if r["split"] == "index" and r["response_ids"]
    ]
    if not turns:
        raise ValueError("the responses hold no answered index prompt to build a history from")
    return turns


@torch.inference_mode()
def decode(
    model: torch.nn.Module, cache: Any, prompt: list[int], drafter: Any, k: int,
    max_new_tokens: int, stops: Sequence[int],
) -> Decoded:  # fmt: skip
    """Greedy speculative decoding of `prompt` from its prefilled cache, cropped back after."""
    tokens, steps = speculative_generate(
        model, prompt, drafter, max_new_tokens, k, eos_token_id=list(stops), prefilled=cache
    )
    crop_to(cache, len(prompt) - 1)
    seconds = sum(s.draft_seconds + s.verify_seconds for s in steps)
    return Decoded(tokens, seconds, len(steps), sum(s.drafted for s in steps),
                   sum(s.accepted for s in steps))  # fmt: skip


@torch.inference_mode()  # the prefill too: outside it, autograd would keep every activation
def run_prompt(
    models: Mapping[str, torch.nn.Module],
    prompt: list[int],
    drafters: Mapping[str, Callable[[], tuple[Any, int]]],
    max_new_tokens: int,
    stops: Sequence[int],
) -> list[dict[str, Any]]:
    """One row per (model, method) for one prompt: greedy first, then every drafter."""
    rows = []
    for label, model in models.items():
        t0 = time.perf_counter()
        cache = prefill(model, prompt)
        prefill_seconds = time.perf_counter() - t0
        per_token = cache_bytes(cache) / cache.get_seq_length()
        runs = {GREEDY: decode(model, cache, prompt, NoDrafter(), 1, max_new_tokens, stops)}
        for name, make in drafters.items():
            drafter, k = make()
            runs[name] = decode(model, cache, prompt, drafter, k, max_new_tokens, stops)
        del cache
        greedy = runs[GREEDY]
        for name, run in runs.items():
            rows.append({
                "model": label, "method": name, "prompt_len": len(prompt),
                "prefill_seconds": prefill_seconds, "cache_bytes_per_token": per_token,
                "exact": run.tokens == greedy.tokens, **asdict(run),
            })  # fmt: skip
    return rows


def measure(
    models: Mapping[str, torch.nn.Module],
    prompts: Mapping[int, Sequence[tuple[str, list[int]]]],
    drafters: Mapping[str, Callable[[], tuple[Any, int]]],
    max_new_tokens: int,
    stops: Sequence[int],
) -> list[dict[str, Any]]:
    """Rows for every context's prompts (`prompts`: context -> [(id, ids)]), after one
    discarded warm-up run of every model and method on the shortest context's first prompt."""
    first = prompts[min(prompts)][0][1]
    run_prompt(models, first, drafters, min(8, max_new_tokens), stops)  # warm-up
    rows = []
    total = sum(map(len, prompts.values()))
    with tqdm(total=total, desc="long-context prompts", unit="prompt", mininterval=10) as bar:
        for context, items in prompts.items():
            for pid, ids in items:
                new = run_prompt(models, ids, drafters, max_new_tokens, stops)
                rows += [{"context": context, "prompt": pid, **r} for r in new]
                bar.update()
    return _agreement(rows, next(iter(models)))


def _agreement(rows: list[dict[str, Any]], base: str) -> list[dict[str, Any]]:
    """Each row's tokens against the first model's greedy tokens on the same prompt: the
    length of their common prefix and its share of the shorter output."""
    ref = {(r["context"], r["prompt"]): r["tokens"] for r in rows
           if r["model"] == base and r["method"] == GREEDY}  # fmt: skip
    for row in rows:
        other = ref[row["context"], row["prompt"]]
        same = common_prefix(row["tokens"], other)
        row["prefix_with_base_greedy"] = same
        row["prefix_share"] = same / max(1, min(len(row["tokens"]), len(other)))
    return rows


def long_prompts(
    questions: Sequence[tuple[str, list[int]]],
    turns: Sequence[list[int]],
    contexts: Sequence[int],
    seed: int,
) -> dict[int, list[tuple[str, list[int]]]]:
    """context -> [(question id, prompt ids)]: each question after its own seeded history."""
    return {
        context: [
            (pid, history_prompt(ids, turns, context,
                                 numpy_generator(seed, "history", pid).permutation(len(turns))))
            for pid, ids in questions
        ]
        for context in contexts
    }  # fmt: skip


def mla_speed_stage(
    inputs: Mapping[str, str],
    out_path: str,
    *,
    models: Mapping[str, str],
    methods: Sequence[str],
    bench: Mapping[str, Any],
    contexts: Sequence[int],
    max_new_tokens: int,
    decode: Mapping[str, Any],
    max_support: int,
    seed: int,
    device: str = "cpu",
    dtype: str = "float32",
    linear: str = "torch",
    threads: int | None = None,
) -> None:
    """Time greedy decoding and every chain method of `methods` on each model of `models`
    ({label: input name}, the GQA original first) at every context. `inputs` holds the models,
    `prompts` (the benchmark set), `responses` (the history), `index_target` and its
    `index_target_stats`, and the adaptive drafters' `calib_index_target` rows if needed."""
    from kvspec.ngram.methods import (
        DecodeSettings,
        Setup,
        input_indexes,
        make_drafter,
        open_engines,
    )

    use_threads(threads)
    loaded, absorbed, tokenizer = {}, {}, None
    for label, name in models.items():
        loaded[label], tok = load_model(inputs[name], dtype=dtype, device=device)
        tokenizer = tokenizer or tok
        absorbed[label] = absorb(loaded[label]) > 0  # DeepSeek-V3 layout: decode in the latent
        pack_linears(loaded[label], linear)  # after absorbing: the engine packs final weights
        check_positions(label, loaded[label].config, max(contexts) + max_new_tokens,
                        "spec.mla_target.contexts or max_new_tokens")  # fmt: skip
    base = loaded[next(iter(models))]
    stops = stop_ids(base, tokenizer)
    setup = Setup(
        base, stops, max_new_tokens, DecodeSettings.from_config(decode), seed=seed,
        engines=open_engines(input_indexes(inputs), max_support),
        calibrations={"target": read_rows(inputs["calib_index_target"])}
        if "calib_index_target" in inputs else {},
    )  # fmt: skip
    drafters = {name: _factory(make_drafter, name, setup) for name in methods}
    questions = bench_prompts(read_jsonl(inputs["prompts"]), bench, tokenizer)
    turns = history_turns(read_jsonl(inputs["responses"]))
    prompts = long_prompts(questions, turns, contexts, seed)
    rows = measure(loaded, prompts, drafters, max_new_tokens, stops)
    for row in rows:
        row["absorbed"] = absorbed[row["model"]]
    _log_summary(rows)
    settings = {"methods": list(methods), "bench": dict(bench), "contexts": list(contexts),
                "max_new_tokens": max_new_tokens, "decode": dict(decode), "seed": seed,
                "device": device, "dtype": dtype}  # fmt: skip
    models_dirs = {label: inputs[name] for label, name in models.items()}
    write_json(out_path, {**provenance(settings, models=models_dirs), "settings": settings,
                          "rows": rows})  # fmt: skip


def _factory(make: Callable[..., tuple[Any, int]], name: str, setup: Any) -> Callable[[], Any]:
    return lambda: make(name, setup)


def _log_summary(rows: Sequence[Mapping[str, Any]]) -> None:
    groups: dict[tuple[str, int, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["context"], row["method"]), []).append(row)
    for (model, context, method), group in groups.items():
        tokens = sum(len(r["tokens"]) for r in group)
        seconds = sum(r["decode_seconds"] for r in group)
        exact = sum(r["exact"] for r in group)
        log.info("%s @ %d %s: %.2f tok/s, %d of %d exact", model, context, method,
                 tokens / seconds, exact, len(group))  # fmt: skip
