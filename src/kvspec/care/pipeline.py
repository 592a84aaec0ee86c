"""The CARE stages as functions of files: calibrate → factorize → (plans.py) → convert → evaluate.

Each stage reads the previous stage's files and writes its own atomically with provenance, so
the workflow (one rule per stage) and a notebook call the same code.
"""

from __future__ import annotations

import copy
import json
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel

from kvspec.care.calibration import batches, calibration_tokens
from kvspec.care.convert import full_factors, max_rank, mla_from_factors
from kvspec.care.covariance import collect_covariances, load_stats, save_stats
from kvspec.care.store import load_factors, load_plan, save_factors
from kvspec.io import atomic_path, link_identical, write_json
from kvspec.models.load import load_model, resolve_dtype, use_threads
from kvspec.provenance import provenance

log = logging.getLogger(__name__)


def covariance_stage(
    model_dir: str,
    data: str,
    out: str,
    *,
    kind: str,
    calib: dict[str, Any],
    seed: int,
    dtype: str = "float32",
    device: str = "cpu",
    threads: int | None = None,
) -> None:
    """Calibration statistics of every layer's K/V input (`calib`: n_samples, seq_len,
    batch_size) from the normalized dataset `data` (of `kind`), saved to `out`."""
    use_threads(threads)
    model, tok = load_model(model_dir, dtype=dtype, device=device)
    ids = calibration_tokens(data, kind, tok, calib["n_samples"], calib["seq_len"], seed)
    log.info("calibration tokens %s from %s", tuple(ids.shape), data)
    stats = collect_covariances(model, list(batches(ids, calib["batch_size"])))
    record = provenance({"data": data, **calib}, model=model_dir, seed=seed)
    save_stats(stats, out, {"provenance": json.dumps(record)})


def factorize_stage(
    model_dir: str,
    stats_path: str | None,
    out: str,
    *,
    method: str,
    opts: dict[str, Any],
    seed: int,
    dtype: str = "float32",
    threads: int | None = None,
) -> None:
    """Full-rank factors and spectra of every K/V matrix by `method`, saved to `out`.

    `opts`: care_alpha, care_lambda, care_shrinkage, asvd_alpha, randomized (the
    `care.factorize` config).
    """
    use_threads(threads)
    model, _ = load_model(model_dir, dtype=dtype)
    stats = load_stats(stats_path) if stats_path else None
    factors = full_factors(
        model,
        method,
        stats,
        alpha=opts["care_alpha"],
        lam_frac=opts["care_lambda"],
        shrinkage=opts["care_shrinkage"],
        asvd_alpha=opts["asvd_alpha"],
        randomized=opts["randomized"],
        seed=seed,
    )
    meta = {"method": method, "provenance": json.dumps(provenance({"method": method, **opts}))}
    save_factors(factors, out, meta)


def convert_stage(
    model_dir: str, factors_path: str, plan_path: str, out_dir: str, threads: int | None = None
) -> None:
    """The MLA model of `plan` (ranks, dropped components) saved with `save_pretrained`.

    The directory holds only what differs from `model_dir` (the K/V factors, config and
    provenance) and refers to `model_dir` for every other weight; tokenizer files identical
    to the base's are hard links to them.
    """
    use_threads(threads)
    model, tok = load_model(model_dir)
    plan = load_plan(plan_path)
    mla = mla_from_factors(
        model,
        load_factors(factors_path),
        plan["ranks_k"],
        plan["ranks_v"],
        plan.get("drop_k"),
        plan.get("drop_v"),
    )
    mla.generation_config = copy.deepcopy(model.generation_config)
    mla.generation_config.cache_implementation = None  # latents need a full-length DynamicCache
    record = provenance(plan, source=model_dir, factors=factors_path, plan=plan_path)
    with atomic_path(out_dir) as tmp:
        mla.save_pretrained(tmp, base_model_dir=model_dir, final_dir=out_dir)
        tok.save_pretrained(tmp)
        link_identical(tmp, model_dir)
        write_json(tmp / "kvspec_provenance.json", record)


def kv_cache_widths(model: PreTrainedModel) -> dict[str, int]:
    """Numbers cached per token, summed over layers: latent r_K + r_V (MLA) or 2·g_h·d_h."""
    cfg = model.config
    if cfg.model_type == "kvspec_mla":
        return {"cached": sum(cfg.kv_rank_k) + sum(cfg.kv_rank_v), "full": _full(cfg)}
    if cfg.model_type == "deepseek_v3":  # restored by kvspec.care.restore: latent + RoPE key
        ranks = getattr(cfg, "kvspec_latent_ranks", None)  # per layer, without padding
        latent = sum(ranks) if ranks else cfg.kv_lora_rank * cfg.num_hidden_layers
        cached = latent + cfg.qk_rope_head_dim * cfg.num_hidden_layers
        return {"cached": cached, "full": getattr(cfg, "kvspec_full_kv_per_token", cached)}
    return {"cached": _full(cfg), "full": _full(cfg)}


def _full(cfg: Any) -> int:
    return 2 * cfg.num_hidden_layers * max_rank(cfg)


def model_summary(model: PreTrainedModel) -> dict[str, Any]:
    """Parameters, their dtype and the KV-cache width of a model (for the evaluation record)."""
    widths = kv_cache_widths(model)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "kv_cached_per_token": widths["cached"],
        "kv_full_per_token": widths["full"],
        "kv_save_pct": 100.0 * (1 - widths["cached"] / widths["full"]),
    }


def evaluate_stage(
    model_dir: str,
    out: str,
    *,
    tasks: dict[str, dict[str, Any]],
    task_dir: str,
    settings: dict[str, Any],
    meta: dict[str, Any],
    threads: int | None = None,
) -> None:
    """lm-eval metrics of the model in `model_dir` on `tasks` (column -> TaskSpec fields),
    with its KV-cache width; `settings`: batch_size, max_length, seed, dtype, device;
    `meta` (model, variant) is copied into the record."""
    from kvspec.eval.harness import TaskSpec, evaluate

    use_threads(threads)
    dtype = resolve_dtype(settings["dtype"], settings["device"])
    log.info("evaluating in %s (eval.dtype: %s)", dtype, settings["dtype"])
    model, tok = load_model(model_dir, dtype=dtype, device=settings["device"])
    specs = {col: TaskSpec(**spec) for col, spec in tasks.items()}
    metrics = evaluate(
        model,
        tok,
        specs,
        task_dir,
        batch_size=settings["batch_size"],
        max_length=settings.get("max_length"),
        seed=settings["seed"],
        device=settings["device"],
    )
    record = {**meta, **model_summary(model), "metrics": metrics}
    write_json(out, {**record, "provenance": provenance({"tasks": tasks, **settings})})


def evaluate_converted_stage(
    model_dir: str,
    factors_path: str,
    plan_path: str,
    out: str,
    *,
    threads: int | None = None,
    **evaluate: Any,
) -> None:
    """`evaluate_stage` of the MLA model of `plan_path`: `convert_stage` saves it into a
    scratch directory beside `out`, removed once it is scored. The model evaluated is the one
    a convert_mla job saves, without a job and a kept copy per evaluated rank plan;
    `evaluate`: evaluate_stage's keyword arguments."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".converted-", dir=Path(out).parent) as scratch:
        converted = str(Path(scratch) / "model")
        convert_stage(model_dir, factors_path, plan_path, converted, threads=threads)
        evaluate_stage(converted, out, threads=threads, **evaluate)


def evaluate_job(
    inputs: Mapping[str, str],
    out: str,
    model: str,
    threads: int | None,
    *,
    tasks: dict[str, dict[str, Any]],
    task_dir: str,
    settings: dict[str, Any],
    variant: str,
) -> None:
    """One evaluate rule's job (the keywords: its params): the saved model `inputs["model"]`,
    or, when the inputs name its `factors` and rank `plan`, the MLA model converted from it."""
    evaluate = {"tasks": tasks, "task_dir": task_dir, "settings": settings,
                "meta": {"model": model, "variant": variant}, "threads": threads}  # fmt: skip
    if "factors" in inputs:
        evaluate_converted_stage(inputs["model"], inputs["factors"], inputs["plan"], out,
                                 **evaluate)  # fmt: skip
    else:
        evaluate_stage(inputs["model"], out, **evaluate)
