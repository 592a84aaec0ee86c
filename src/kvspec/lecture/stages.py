"""The lecture rules' stage functions: load, measure, write one JSON with provenance."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import torch
from tqdm import tqdm

from kvspec.io import read_json, write_json
from kvspec.models.load import load_model, use_threads
from kvspec.provenance import provenance
from kvspec.seeds import python_random

log = logging.getLogger(__name__)


def model_dims(cfg: Any) -> dict[str, int]:
    """The shapes the intensity formulas read from a transformers config."""
    heads = cfg.num_attention_heads
    return {
        "hidden": cfg.hidden_size, "intermediate": cfg.intermediate_size, "heads": heads,
        "kv_heads": cfg.num_key_value_heads, "layers": cfg.num_hidden_layers,
        "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
    }  # fmt: skip


def roofline_stage(model_dir: str, out: str, *, settings: Mapping[str, Any], seed: int,
                   threads: int) -> None:  # fmt: skip
    """This machine's roofline on the model's MLP shape, and the lecture's intensities."""
    from transformers import AutoConfig

    from kvspec.lecture import roofline as rl

    use_threads(threads)
    dims = model_dims(AutoConfig.from_pretrained(model_dir))
    measured = rl.measure_roofline(settings["matmul_batch_sizes"], dims["hidden"],
                                   dims["intermediate"], settings["bandwidth_mb"],
                                   settings["repeats"], seed)  # fmt: skip
    log.info("peak %.1f GFLOP/s, bandwidth %.1f GB/s, ridge %.1f FLOPs/byte",
             measured["peak_gflop_s"], measured["bandwidth_gb_s"], measured["ridge"])  # fmt: skip
    rows = rl.intensity_rows(dims, settings["batch_sizes"], settings["prompt_lengths"],
                             settings["context"])  # fmt: skip
    h100 = {"peak_flops": rl.H100_PEAK_FLOPS, "bandwidth": rl.H100_BANDWIDTH,
            "ridge": rl.ridge(rl.H100_PEAK_FLOPS, rl.H100_BANDWIDTH)}  # fmt: skip
    write_json(out, {"dims": dims, "machine": measured, "h100": h100, "intensity": rows,
                     "provenance": provenance(dict(settings), model=model_dir)})  # fmt: skip


def batching_stage(model_dir: str, roofline: str, out: str, *, settings: Mapping[str, Any],
                   seed: int, device: str, dtype: str, linear: str,
                   threads: int) -> None:  # fmt: skip
    """Decode latency/throughput per batch size and TTFT per prompt length."""
    from kvspec.lecture.batching import batch_rows, ttft_rows

    use_threads(threads)
    model, _ = load_model(model_dir, dtype=dtype, device=device, linear=linear)
    bandwidth = read_json(roofline)["machine"]["bandwidth_gb_s"] * 1e9
    rows = batch_rows(model, settings["batch_sizes"], settings["context"], settings["steps"],
                      bandwidth, seed)  # fmt: skip
    ttft = ttft_rows(model, settings["prompt_lengths"], settings["repeats"], seed)
    write_json(out, {"batch": rows, "ttft": ttft, "bandwidth_gb_s": bandwidth / 1e9,
                     "provenance": provenance(dict(settings), model=model_dir)})  # fmt: skip


def kv_cache_stage(models: Mapping[str, str], out: str, *, settings: Mapping[str, Any],
                   seed: int, device: str, dtype: str, threads: int) -> None:  # fmt: skip
    """Formula rows for our models and the documents', bytes measured on real caches."""
    from kvspec.care.pipeline import kv_cache_widths
    from kvspec.lecture import kv_cache as kv

    use_threads(threads)
    context, bytes_per = settings["context"], torch.finfo(getattr(torch, dtype)).bits // 8
    formulas, measured = [], []
    for name, shape in kv.DOCUMENT_MODELS.items():
        formulas += kv.formula_rows(name, kv.Shape(**shape), context, bytes_per=2)
    for label, path in models.items():
        model, _ = load_model(path, dtype=dtype, device=device)
        shape = kv.Shape.of(model.config)
        widths = kv_cache_widths(model)
        only = None
        if widths["cached"] != kv.gqa(shape):  # an MLA conversion: its latent, layer-summed
            shape = kv.Shape(shape.layers, shape.heads, shape.kv_heads, shape.head_dim,
                             latent=round(widths["cached"] / shape.layers))  # fmt: skip
            only = "MLA"
        formulas += kv.formula_rows(label, shape, context, bytes_per, only)
        measured.append(_measured(label, model, widths["cached"], shape, context, seed))
        if label == next(iter(models)):
            twin = kv.mha_twin(model)
            measured.append(_measured(f"{label} as MHA (KV heads repeated)", twin,
                                      kv.mha(shape), shape, context, seed))  # fmt: skip
        del model
    write_json(out, {"context": context, "dtype": dtype, "formula": formulas,
                     "documents": kv.DOCUMENT_MODELS,
                     "measured": measured, "provenance": provenance(dict(settings))})  # fmt: skip


def _measured(label: str, model: torch.nn.Module, numbers: float, shape: Any, context: int,
              seed: int) -> dict[str, Any]:  # fmt: skip
    from kvspec.lecture import kv_cache as kv

    bytes_per = next(model.parameters()).element_size()
    formula = kv.windowed(shape, context) if shape.window else numbers
    got = kv.measured_bytes_per_token(model, context, seed)
    return {"model": label, "context": context, "formula_bytes_per_token": formula * bytes_per,
            "measured_bytes_per_token": got, "ratio": got / (formula * bytes_per)}  # fmt: skip


def quantization_stage(model_dir: str, calibration: str, out: str, *,
                       settings: Mapping[str, Any], calib_kind: str, tasks: dict[str, Any],
                       task_dir: str, eval_settings: Mapping[str, Any], seed: int,
                       threads: int) -> None:  # fmt: skip
    """The toy example, then the model's perplexity (lm-eval) under each 4-bit method."""
    from kvspec.care.calibration import batches, calibration_tokens
    from kvspec.eval.harness import TaskSpec, evaluate
    from kvspec.lecture import quantize as q

    use_threads(threads)
    toy = q.toy_example(settings["toy_step"], settings["toy_scale"], settings["awq_grid"])
    model, tok = load_model(model_dir, dtype=eval_settings["dtype"],
                            device=eval_settings["device"])  # fmt: skip
    tokens = calibration_tokens(calibration, calib_kind, tok, settings["n_samples"],
                                settings["seq_len"], seed)  # fmt: skip
    stats = q.collect_stats(model, list(batches(tokens, 8)), settings["sample_rows"], seed)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    specs = {col: TaskSpec(**spec) for col, spec in tasks.items()}
    keys = ("batch_size", "max_length", "seed", "device")
    results = []
    for bits in [None, *settings["bits"]]:
        for method in ["none"] if bits is None else settings["methods"]:
            model.load_state_dict(original)
            start, alphas = time.perf_counter(), {}
            if bits is not None:
                quant = q.group_quantizer(bits, settings["group_size"])
                alphas = q.quantize_model(
                    model, stats, method, quant, settings["salient_fraction"], settings["awq_grid"]
                )
            seconds = time.perf_counter() - start
            metrics = evaluate(model, tok, specs, task_dir,
                               **{k: eval_settings[k] for k in keys})  # fmt: skip
            log.info("bits %s %s: %s", bits, method, {c: m["value"] for c, m in metrics.items()})
            results.append({"bits": bits, "method": method, "quantize_seconds": seconds,
                            "alpha_mean": sum(alphas.values()) / len(alphas) if alphas else None,
                            "metrics": {c: {k: m[k] for k in ("metric", "value", "stderr", "n")}
                                        for c, m in metrics.items()}})  # fmt: skip
    write_json(
        out,
        {
            "toy": toy,
            "model": results,
            "provenance": provenance({**settings, "tasks": tasks}, model=model_dir),
        },
    )


def speculative_stage(inputs: Mapping[str, str], out: str, *, settings: Mapping[str, Any],
                      bench: Mapping[str, Any], seed: int, device: str, dtype: str, linear: str,
                      threads: int, draft_linear: str | None = None) -> None:  # fmt: skip
    """The worked example and exactness (simulated), and formula vs measured accepted length
    with the draft model on real prompts."""
    from kvspec.data.records import read_jsonl
    from kvspec.decoding.generate import stop_ids
    from kvspec.decoding.prompts import bench_prompts
    from kvspec.lecture import spec_example as se

    use_threads(threads)
    trials = settings["trials"]
    exact = se.exactness_rows(se.QUICK_BROWN_P, se.QUICK_BROWN_Q, "quick brown", trials, seed)
    exact += se.exactness_rows(se.BINARY_P, se.BINARY_Q, "binary proof", trials, seed)
    target, tok = load_model(inputs["target"], dtype=dtype, device=device, linear=linear)
    engine = draft_linear or linear
    draft, _ = load_model(inputs["draft"], dtype=dtype, device=device, linear=engine)
    prompts = [ids for _, ids in bench_prompts(read_jsonl(inputs["prompts"]), bench, tok)]
    measured = se.measured_rows(target, draft, prompts, settings["ks"],
                                settings["max_new_tokens"], settings["temperature"],
                                stop_ids(target, tok), seed)  # fmt: skip
    write_json(out, {"acceptance": se.acceptance_rows(trials, seed), "exactness": exact,
                     "accepted_length": measured, "words": se.WORDS,
                     "provenance": provenance(dict(settings), bench=dict(bench))})  # fmt: skip


def scheduling_stage(inputs: Mapping[str, str], out: str, *, settings: Mapping[str, Any],
                     bench: Mapping[str, Any], seed: int, device: str, dtype: str, linear: str,
                     threads: int) -> None:  # fmt: skip
    """Static vs continuous batching on the same seeded stream of requests."""
    from kvspec.data.records import read_jsonl
    from kvspec.decoding.prompts import bench_prompts
    from kvspec.lecture import scheduler as sch

    use_threads(threads)
    model, tok = load_model(inputs["model"], dtype=dtype, device=device, linear=linear)
    prompts = [ids for _, ids in bench_prompts(read_jsonl(inputs["prompts"]), bench, tok)]
    requests = request_stream(prompts, settings, seed)
    runs, outputs, traces = {}, {}, {}
    for policy in settings["policies"]:
        start = time.perf_counter()
        finished, batch = sch.run(model, requests, settings["slots"], policy)
        runs[policy] = sch.summary(finished, batch, time.perf_counter() - start)
        traces[policy] = batch.kv_trace
        outputs[policy] = {f.rid: f.tokens for f in finished}
        log.info("%s: %s", policy, runs[policy])
    first = outputs[settings["policies"][0]]
    same = {p: sum(o[r] == first[r] for r in first) / len(first) for p, o in outputs.items()}
    write_json(out, {"runs": runs, "same_tokens_as_first_policy": same, "settings": dict(settings),
                     "requests": [vars(r) | {"prompt": len(r.prompt)} for r in requests],
                     "kv_trace": traces,
                     "provenance": provenance(dict(settings), bench=dict(bench))})  # fmt: skip


def request_stream(prompts: list[list[int]], settings: Mapping[str, Any], seed: int) -> list:
    """`requests` requests cycling over the prompts, each wanting a seeded uniform number of
    new tokens in [min, max], arriving at seeded Poisson times (`rate` per second; all at
    once when rate is null)."""
    from kvspec.lecture.scheduler import Request

    rng = python_random(seed, "requests")
    low, high = settings["new_tokens"]
    clock, requests = 0.0, []
    for i in range(settings["requests"]):
        if settings["rate"]:
            clock += rng.expovariate(settings["rate"])
        requests.append(Request(i, prompts[i % len(prompts)], rng.randint(low, high), clock))
    return requests


def paged_stage(inputs: Mapping[str, str], out: str, *, settings: Mapping[str, Any],
                bench: Mapping[str, Any], seed: int, device: str, dtype: str, linear: str,
                threads: int) -> None:  # fmt: skip
    """PagedAttention's example: the scheduling example's batches replayed under a padded,
    a contiguous-reservation and a block layout (`inputs['scheduling']`); then `samples`
    seeded parallel samples of the first prompt sharing its blocks with copy-on-write."""
    from kvspec.data.records import read_jsonl
    from kvspec.decoding.generate import stop_ids
    from kvspec.decoding.prompts import bench_prompts
    from kvspec.decoding.warp import sample_generate
    from kvspec.lecture import paged
    from kvspec.seeds import derive

    use_threads(threads)
    sched, block = read_json(inputs["scheduling"]), settings["block_size"]
    most = max(sched["settings"]["new_tokens"])  # what a contiguous reservation holds back
    reserve = {r["rid"]: r["prompt"] + most for r in sched["requests"]}
    layouts = [{"policy": policy, **row} for policy, trace in sched["kv_trace"].items()
               for row in paged.slot_accounting(trace, reserve, block)]  # fmt: skip
    model, tok = load_model(inputs["model"], dtype=dtype, device=device, linear=linear)
    prompt = bench_prompts(read_jsonl(inputs["prompts"]), bench, tok)[0][1]
    samples = [sample_generate(model, prompt, settings["new_tokens"],
                               temperature=settings["temperature"],
                               eos_token_id=stop_ids(model, tok),
                               seed=derive(seed, "paged", "sample", i))[0]
               for i in tqdm(range(settings["samples"]), desc="samples")]  # fmt: skip
    shared = paged.shared_samples(prompt, samples, block)
    dims = model_dims(model.config)
    per_token = 2 * dims["layers"] * dims["kv_heads"] * dims["head_dim"]
    per_token *= next(model.parameters()).element_size()
    log.info("layouts: %s; copy-on-write: %s copies", layouts, shared["copies"])
    write_json(out, {"layouts": layouts, "shared": shared, "kv_bytes_per_token": per_token,
                     "sample_lengths": [len(s) for s in samples], "settings": dict(settings),
                     "provenance": provenance(dict(settings), bench=dict(bench))})  # fmt: skip
