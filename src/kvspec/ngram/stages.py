"""The speculative-decoding stages as functions of files: prompts → responses → indexes →
acceptance and speed. Each writes its outputs atomically with provenance, so a rule script
and a notebook call the same code."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import AutoConfig, AutoTokenizer

from kvspec.data.records import read_jsonl, write_jsonl
from kvspec.decoding.generate import (
    config_stops,
    gather_shards,
    generate_shard,
    generation_prompts,
    shard_slice,
    stop_ids,
)
from kvspec.io import read_json, read_rows, write_json, write_rows, write_text
from kvspec.models.load import load_model, use_threads
from kvspec.ngram.corpora import heldout_items, index_documents
from kvspec.ngram.index import build_index, open_engine
from kvspec.ngram.prompts import index_prompts, select_prompts
from kvspec.provenance import provenance
from kvspec.seeds import derive, numpy_generator

log = logging.getLogger(__name__)


def prompts_stage(
    sources: Mapping[str, str],
    out: str,
    *,
    heldout: Mapping[str, Any],
    limit: int | None,
    seed: int,
) -> None:
    """SFT prompts of the study from instruction datasets, split into index and held-out."""
    records = {name: read_jsonl(path, "instruction") for name, path in sources.items()}
    prompts = select_prompts(records, heldout, seed, limit)
    write_jsonl(out, prompts)
    log.info("%d prompts (%d held out)", len(prompts), sum(r["split"] != "index" for r in prompts))


def responses_stage(
    prompts_path: str,
    model_dir: str,
    out: str,
    *,
    shard: int,
    shards: int,
    fraction: float,
    heldout: bool,
    max_new_tokens: int,
    batch_size: int,
    device: str,
    dtype: str,
    threads: int,
    checkpoint: str | None = None,
) -> None:
    """One shard of a model's greedy responses to its share of the prompts."""
    use_threads(threads)
    prompts = generation_prompts(read_jsonl(prompts_path), fraction, heldout)
    mine = [prompts[i] for i in shard_slice(len(prompts), shards, shard)]
    model, tokenizer = load_model(model_dir, dtype=dtype, device=device)
    generate_shard(model, tokenizer, mine, out, max_new_tokens, batch_size, checkpoint=checkpoint)


def gather_stage(shards: Sequence[str], out: str) -> None:
    """The shards of one model's responses, concatenated in order."""
    n = gather_shards(list(shards), out)
    log.info("%d responses gathered from %d shards", n, len(shards))


def index_stage(
    corpus_path: str,
    model_dir: str,
    *,
    corpus: str,
    fraction: float,
    out_index: str,
    out_stats: str,
    cpus: int,
) -> None:
    """An infini-gram index over SFT or target responses; build time, bytes/token, counts.

    The index is keyed by the model's full vocabulary; `build_index` picks 16-bit ids,
    possibly over a compact vocabulary, whenever the corpus allows it.
    """
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    vocab = max(AutoConfig.from_pretrained(model_dir).vocab_size, len(tokenizer))
    stops = config_stops(model_dir, tokenizer)
    docs = index_documents(read_jsonl(corpus_path), corpus, fraction, tokenizer, stops)
    stats = build_index(docs, out_index, vocab, tokenizer.eos_token_id, cpus=cpus)
    log.info("index %s_%s: %s", corpus, fraction, stats)
    meta = {
        "corpus": corpus,
        "fraction": fraction,
        "vocab_size": vocab,
        "eos_token_id": tokenizer.eos_token_id,
    }
    write_json(out_stats, {**stats, **meta, "provenance": provenance(meta)})


def acceptance_stage(
    model_dir: str,
    index_dir: str,
    index_stats: str,
    outputs_path: str,
    out: str,
    *,
    heldout: str,
    responder: str,
    max_support: int,
    temperature: float,
    max_tokens: int,
    device: str,
    dtype: str,
    threads: int,
) -> None:
    """Per-position acceptance of one index along one held-out set's responses."""
    from kvspec.ngram.acceptance import acceptance_rows

    use_threads(threads)
    model, tokenizer = load_model(model_dir, dtype=dtype, device=device)
    stats = read_json(index_stats)
    engine = open_engine(index_dir, stats["vocab_size"], stats["eos_token_id"], max_support)
    stops = stop_ids(model, tokenizer)
    records = read_jsonl(outputs_path)
    items = heldout_items(records, heldout, responder, tokenizer, stops, max_tokens)
    rows = acceptance_rows(model, engine, items, temperature)
    log.info(
        "%d positions over %d prompts, mean acceptance %.4f",
        len(rows),
        len(items),
        rows["acceptance"].mean(),
    )
    prov = provenance(
        {"index": index_dir, "heldout": heldout, "responder": responder},
        index=stats["provenance"]["config_hash"],
    )
    write_rows(out, rows, prov)


def speed_stage(
    inputs: Mapping[str, str],
    out_runs: str,
    out_summary: str,
    *,
    model: str,
    methods: Sequence[str],
    bench: Mapping[str, Any],
    decode: Mapping[str, Any],
    max_new_tokens: int,
    repeats: int,
    max_support: int,
    device: str,
    dtype: str,
    seed: int,
    threads: int,
    baseline_repeats: int = 1,
    unstable_spread: float,
) -> None:
    """Every decoding method on one benchmark set, side by side in this process.

    `inputs` holds `model`, `prompts` and whatever the methods need (`draft`, `index_sft`,
    `index_target` with their `*_stats`, acceptance rows `calib_index_*` calibrating the
    adaptive methods; see `kvspec.ngram.registry`).
    """
    from kvspec.decoding.bench import run_benchmark
    from kvspec.decoding.bench_summary import mark_divergence, summarize
    from kvspec.decoding.prompts import bench_prompts
    from kvspec.ngram.methods import DecodeSettings, Setup, benchmark_methods, open_engines

    use_threads(threads)
    target, tokenizer = load_model(inputs["model"], dtype=dtype, device=device)
    draft = (
        load_model(inputs["draft"], dtype=dtype, device=device)[0] if "draft" in inputs else None
    )
    indexes = {
        name.removeprefix("index_"): (inputs[name], inputs[f"{name}_stats"])
        for name in ("index_sft", "index_target")
        if name in inputs
    }
    setup = Setup(
        target,
        stop_ids(target, tokenizer),
        max_new_tokens,
        DecodeSettings.from_config(decode),
        seed=seed,
        draft=draft,
        engines=open_engines(indexes, max_support),
        calibrations={
            name.removeprefix("calib_index_"): read_rows(path)
            for name, path in inputs.items()
            if name.startswith("calib_index_")
        },
        arctic_suffix=inputs.get("arctic_suffix"),
        corpus=_suffix_corpus(inputs["responses"]) if "arctic_suffix" in inputs else (),
    )
    prompts = bench_prompts(read_jsonl(inputs["prompts"]), bench, tokenizer)
    methods_ = benchmark_methods(setup, methods, decode["modes"])
    records = run_benchmark(methods_, prompts, repeats, baseline_repeats=baseline_repeats)
    mark_divergence(target, records, prompts)
    summary = summarize(records, unstable_spread=unstable_spread)
    if summary["baseline_unstable"].iloc[0]:
        log.warning(
            "greedy baseline varied by %.0f%% across its repeats (load average up to %.1f): "
            "the machine was busy; these ratios are unreliable",
            100 * summary["baseline_spread"].iloc[0], summary["load1_max"].iloc[0],
        )  # fmt: skip
    log.info("\n%s", summary.to_string())
    meta = {"model": model, "bench": dict(bench), "decode": dict(decode), "methods": methods}
    write_json(out_runs, {"records": records, "provenance": provenance(meta)})
    write_text(out_summary, summary.to_csv(index=False))


def _suffix_corpus(responses: str) -> list[tuple[list[int], list[int]]]:
    """(prompt, response) ids of the index prompts: the documents of the target index."""
    chosen = index_prompts(read_jsonl(responses), 1.0)
    return [(list(r["prompt_ids"]), list(r["response_ids"])) for r in chosen if r["response_ids"]]


def draft_quality_stage(
    inputs: Mapping[str, str],
    out: str,
    *,
    model: str,
    sets: Mapping[str, Mapping[str, Any]],
    settings: Mapping[str, Any],
    device: str,
    dtype: str,
    seed: int,
    threads: int,
) -> None:
    """One draft's accepted length on each prompt set and its per-forward cost relative to
    its target (`inputs`: `target`, `draft`, `prompts_<set>`; `settings`: spec.drafts)."""
    from kvspec.decoding.prompts import bench_prompts
    from kvspec.models.build import count_parameters
    from kvspec.ngram.draft_quality import draft_quality

    use_threads(threads)
    target, tokenizer = load_model(inputs["target"], dtype=dtype, device=device)
    draft, _ = load_model(inputs["draft"], dtype=dtype, device=device)
    prompts = {
        name: bench_prompts(read_jsonl(inputs[f"prompts_{name}"]), bench, tokenizer)
        for name, bench in sets.items()
    }
    keys = ("k", "max_new_tokens", "cache_len", "feeds", "repeats")
    result = draft_quality(
        target, draft, prompts, stops=stop_ids(target, tokenizer), seed=seed,
        **{k: settings[k] for k in keys},
    )  # fmt: skip
    log.info("draft %s: %s", model, result)
    meta = {"model": model, "sets": dict(sets), "settings": dict(settings)}
    sizes = {"target": count_parameters(target), "draft": count_parameters(draft)}
    write_json(out, {**result, "parameters": sizes, "provenance": provenance(meta)})


def draft_latency_stage(
    inputs: Mapping[str, str],
    out: str,
    *,
    model: str,
    settings: Mapping[str, Any],
    decode: Mapping[str, Any],
    seed: int,
) -> None:
    """Draft latency of inf_nkt on the model's target-response index (`inputs`: `index`,
    `index_stats`, `responses`; `settings`: spec.latency), JSON with provenance."""
    from kvspec.ngram.drafters import InfiniGramDrafter
    from kvspec.ngram.latency import draft_latency

    stats = read_json(inputs["index_stats"])
    engine = open_engine(
        inputs["index"], stats["vocab_size"], stats["eos_token_id"], settings["max_support"]
    )
    held = [r for r in read_jsonl(inputs["responses"]) if r["split"] != "index"]
    if not held:
        raise ValueError(f"{inputs['responses']}: no held-out responses to time drafts on")
    rng = numpy_generator(seed, "latency responses")
    picks = rng.choice(len(held), size=min(settings["responses"], len(held)), replace=False)
    pairs = [(list(held[i]["prompt_ids"]), list(held[i]["response_ids"])) for i in sorted(picks)]

    def make() -> InfiniGramDrafter:
        return InfiniGramDrafter(
            engine,
            confidence=decode["confidence"],
            min_match=decode["min_match"],
            seed=derive(seed, "draft"),
        )

    result = draft_latency(make, pairs, settings["k"], settings["sequential_contexts"])
    log.info("draft latency of %s, k=%d, max_support=%d: %s", model, settings["k"],
             settings["max_support"], result)  # fmt: skip
    meta = {"model": model, "settings": dict(settings), "decode": dict(decode), "index": stats}
    write_json(out, {**result, "provenance": provenance(meta)})
