"""The Table 3.3 stages as functions of files: restore (TransMLA layout) → heal (budgets)."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvspec.care.budgets import budget_steps
from kvspec.care.calibration import token_stream
from kvspec.care.covariance import load_stats
from kvspec.care.heal import HealSpec, heal
from kvspec.care.pipeline import kv_cache_widths
from kvspec.care.restore import (
    RestoreSpec,
    kv_cache_per_token,
    latent_rank,
    restore_model,
    rope_per_group,
)
from kvspec.io import atomic_path, write_json, write_text
from kvspec.models.load import load_model, load_weights, use_threads
from kvspec.models.parallel import rank_and_world
from kvspec.provenance import config_hash, provenance

log = logging.getLogger(__name__)


def restore_stage(
    model_dir: str,
    stats_path: str,
    out_dir: str,
    *,
    method: str,
    rank: int,
    freqfold: int,
    factorize_opts: dict[str, Any],
    cache: str = "matched",
    rope_width: int | None = None,
    schedule: str = "uniform",
    shrinkage: str | None = None,
    rank_bounds: list[float] | None = None,
    threads: int | None = None,
) -> None:
    """Restore the Llama model in `model_dir` to DeepSeek-V3 attention at MLA rank `rank` and
    save it: the cache of a rank-r CARE model (2·r per token and layer, ``matched``) or
    kv_lora_rank r + the RoPE key (``official``). `shrinkage` (None: the factorize options')
    and `rank_bounds` (fractions of the mean latent rank) are CARE's settings."""
    use_threads(threads)
    settings = {"method": method, "rank": rank, "freqfold": freqfold, "cache": cache,
                "rope_width": rope_width, "schedule": schedule, "shrinkage": shrinkage,
                "rank_bounds": rank_bounds}  # fmt: skip
    with atomic_path(out_dir) as tmp:
        save_restoration(model_dir, stats_path, settings, factorize_opts, tmp)


def save_restoration(
    model_dir: str,
    stats_path: str,
    settings: dict[str, Any],
    factorize_opts: dict[str, Any],
    out_dir: Path,
) -> dict[str, Any]:
    """Restore the model in `model_dir` (`restoration`'s settings) and save it, its tokenizer
    and its record (returned) into the existing directory `out_dir`."""
    model, tok = load_model(model_dir)
    restored, record = restoration(model, stats_path, settings, factorize_opts)
    restored.generation_config = model.generation_config
    record = provenance(record, source=model_dir, stats=stats_path, kv_cache=record["kv_cache"])
    restored.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    write_json(Path(out_dir) / "kvspec_provenance.json", record)
    return record


def restoration(
    model: Any, stats_path: str, settings: dict[str, Any], factorize_opts: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """The restored DeepSeek-V3 model of `model` and a record of its settings, latent ranks
    and cache. `settings`: method, rank, freqfold, cache, rope_width, schedule, shrinkage,
    rank_bounds (the last two may be None)."""
    head_dim = getattr(model.config, "head_dim", None) or (
        model.config.hidden_size // model.config.num_attention_heads
    )
    s = settings
    per_group = rope_per_group(head_dim, s["freqfold"], s["rope_width"])
    bounds = s["rank_bounds"]
    spec = RestoreSpec(
        method=s["method"],
        kv_lora_rank=latent_rank(model.config, s["rank"], s["freqfold"], s["cache"], per_group),
        freqfold=s["freqfold"],
        rope_per_group=per_group,
        schedule=s["schedule"],
        care_alpha=factorize_opts["care_alpha"],
        care_lambda=factorize_opts["care_lambda"],
        shrinkage=s["shrinkage"] or factorize_opts["care_shrinkage"],
        rank_bounds=tuple(bounds) if bounds else None,
    )
    restored = restore_model(model, load_stats(stats_path).cov, spec)
    restored.config.kvspec_full_kv_per_token = kv_cache_widths(model)["full"]
    cache = kv_cache_per_token(restored.config)
    ranks = getattr(restored.config, "kvspec_latent_ranks", None)
    log.info(
        "%s: rank %d -> kv_lora_rank %d (%s, shrinkage %s) + RoPE key %d = %g cached numbers "
        "per token and layer; latent ranks per layer %s",
        s["method"],
        s["rank"],
        spec.kv_lora_rank,
        s["schedule"],
        spec.shrinkage,
        restored.config.qk_rope_head_dim,
        cache["per_layer"],
        ranks or "uniform",
    )
    record = {**s, "rope_per_group": per_group, **factorize_opts, "shrinkage": spec.shrinkage,
              "kv_lora_rank": spec.kv_lora_rank,
              "latent_ranks": ranks or [spec.kv_lora_rank] * restored.config.num_hidden_layers,
              "kv_cache": cache}  # fmt: skip
    return restored, record


def healing_tokens(
    data: str, kind: str, tokenizer: Any, opts: dict[str, Any], seq_len: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) token streams: the stream's last `val_fraction` is held out."""
    stream = np.asarray(token_stream(data, kind, tokenizer, opts["max_tokens"], seed), np.int32)
    n_val = max(int(len(stream) * opts["val_fraction"]), seq_len + 1)
    if len(stream) - n_val <= seq_len:
        raise ValueError(
            f"{data}: {len(stream)} tokens are too few to heal with windows of "
            f"{seq_len} and hold out {n_val}"
        )
    return stream[:-n_val], stream[-n_val:]


def heal_stage(
    student_dir: str,
    teacher_dir: str,
    data: str,
    *,
    kind: str,
    data_opts: dict[str, Any],
    train_opts: dict[str, Any],
    seed: int,
    outputs: dict[str, Any],
    state_path: str | None = None,
    threads: int | None = None,
) -> None:
    """Heal the student; `outputs`: models (one dir per budget), curve (CSV), stats (JSON)."""
    use_threads(threads)
    spec = _heal_spec(train_opts, seed)
    args = (student_dir, teacher_dir, data, kind, data_opts, spec, outputs, state_path)
    if spec.processes > 1:  # one process per GPU (gloo processes on CPU)
        from kvspec.models.parallel import launch

        launch(_heal_and_write, spec.processes, *args)
    else:
        _heal_and_write(*args)


def _heal_and_write(
    student_dir, teacher_dir, data, kind, data_opts, spec: HealSpec, outputs, state_path
) -> None:
    student, tok = load_model(student_dir)
    teacher, _ = load_model(teacher_dir)
    train_ids, val_ids = healing_tokens(data, kind, tok, data_opts, spec.seq_len, spec.seed)
    log.info(
        "healing %s: %d train / %d held-out tokens; %d steps of %d tokens; budgets %s",
        student_dir,
        len(train_ids),
        len(val_ids),
        spec.total_steps,
        spec.tokens_per_step,
        spec.budgets,
    )
    staged = _staging_dirs(spec.budgets, outputs["models"], state_path)
    started, reached = time.perf_counter(), {}

    def save_budget(budget: int, model) -> None:
        reached[budget] = time.perf_counter() - started
        record = provenance({"budget": budget, "spec": repr(spec)}, student=student_dir)
        with atomic_path(staged[budget]) as tmp:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            write_json(tmp / "kvspec_provenance.json", record)

    fingerprint = config_hash([student_dir, teacher_dir, data, data_opts])
    curve = heal(student, teacher, train_ids, val_ids, spec, save_budget, state_path, fingerprint)
    if rank_and_world()[0] > 0:  # the first process writes
        return
    for budget, final in zip(spec.budgets, outputs["models"], strict=True):
        if Path(staged[budget]) != Path(final):
            with atomic_path(final) as tmp:
                shutil.copytree(staged[budget], tmp)
    table = pd.DataFrame(curve).drop(columns="val_nll", errors="ignore")
    write_text(outputs["curve"], table.to_csv(index=False))
    stats = {
        "parameters": sum(p.numel() for p in student.parameters()),
        "tokens_per_step": spec.tokens_per_step,
        "processes": rank_and_world()[1],
        "sharded": spec.sharding == "fsdp" and rank_and_world()[1] > 1,  # FSDP2 (care.engines)
        "budget_steps": {str(b): spec.steps_for(b) for b in spec.budgets},
        "seconds_to_budget_this_run": {str(b): s for b, s in reached.items()},
        "val_ppl_start": curve[0]["val_ppl"],
        "val_ppl_end": curve[-1]["val_ppl"],
        # per held-out window, at step 0 and at each budget: paired comparisons across methods
        "val_nll_windows": _window_nlls(curve, spec),
        "kv_cache": kv_cache_widths(student),
        "provenance": provenance(data_opts, spec=repr(spec)),
    }
    write_json(outputs["stats"], stats)
    if state_path:
        Path(state_path).unlink(missing_ok=True)
        for path in staged.values():
            shutil.rmtree(path, ignore_errors=True)


def ablation_stage(
    model_dir: str,
    stats_path: str,
    data: str,
    out_path: str,
    *,
    variant: dict[str, Any],
    restore: dict[str, Any],
    factorize_opts: dict[str, Any],
    kind: str,
    data_opts: dict[str, Any],
    train_opts: dict[str, Any],
    seed: int,
    state_path: str | None = None,
    threads: int | None = None,
) -> None:
    """One row of the Table 3.3 ablation: restore with the variant's settings (method,
    shrinkage, rank schedule and bounds, over the variant's calibration statistics), heal it
    to the one budget in `train_opts`, and write the validation curve, the per-window NLLs at
    step 0 and at the budget, and the per-layer latent ranks (no checkpoint is kept)."""
    use_threads(threads)
    settings = {**restore, "method": variant["method"], "schedule": variant["schedule"],
                "shrinkage": variant["shrinkage"],
                "rank_bounds": variant["rank_bounds"]}  # fmt: skip
    spec = _heal_spec(train_opts, seed)
    teacher, tok = load_model(model_dir)
    restored, record = restoration(teacher, stats_path, settings, factorize_opts)
    with tempfile.TemporaryDirectory(prefix="kvspec-ablation-") as tmp:
        restored.save_pretrained(tmp)  # healed as heal_train heals: loaded from its directory
        student = load_weights(tmp)
    del restored
    train_ids, val_ids = healing_tokens(data, kind, tok, data_opts, spec.seq_len, spec.seed)
    started = time.perf_counter()
    fingerprint = config_hash([model_dir, stats_path, data, data_opts, record])
    curve = heal(student, teacher, train_ids, val_ids, spec, lambda *_: None, state_path,
                 fingerprint)  # fmt: skip
    result = {
        "variant": variant,
        "restoration": record,
        "budget": spec.budgets[0],
        "seconds": time.perf_counter() - started,
        "val_ppl_start": curve[0]["val_ppl"],
        "val_ppl_end": curve[-1]["val_ppl"],
        "teacher_val_ppl": curve[0].get("teacher_val_ppl"),
        "val_nll_windows": _window_nlls(curve, spec),
        "curve": [{k: v for k, v in row.items() if k != "val_nll"} for row in curve],
        "provenance": provenance(data_opts, spec=repr(spec), source=model_dir, stats=stats_path),
    }
    write_json(out_path, result)
    if state_path:
        Path(state_path).unlink(missing_ok=True)


def _heal_spec(train_opts: dict[str, Any], seed: int) -> HealSpec:
    """The healing settings, `mixed_precision: auto` resolved on this machine (the spec's repr
    goes into every record)."""
    from kvspec.care.engines import resolve_mixed_precision

    return HealSpec(**{**train_opts, "budgets": list(train_opts["budgets"]),
                       "mixed_precision": resolve_mixed_precision(
                           train_opts.get("mixed_precision", HealSpec.mixed_precision))},
                    seed=seed)  # fmt: skip


def _window_nlls(curve: list[dict[str, Any]], spec: HealSpec) -> dict[str, list[float]]:
    """{tokens seen: per-window validation NLL} at step 0 and at each budget."""
    steps = {0, *budget_steps(spec.budgets, spec.tokens_per_step)}
    return {str(r["tokens"]): r["val_nll"] for r in curve if r["step"] in steps and "val_nll" in r}


def _staging_dirs(budgets: list[int], finals: list[str], state_path: str | None) -> dict:
    """Where each budget's checkpoint is written during the run: beside the resumable state
    (a rerun after a crash starts by deleting the job's outputs, but must keep checkpoints
    of budgets already passed), or straight to the output without a state file."""
    if not state_path:
        return dict(zip(budgets, finals, strict=True))
    state = Path(state_path)
    return {b: state.parent / f"{state.stem}.tokens-{b}" for b in budgets}
