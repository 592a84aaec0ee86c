"""The Table 3.3 stages as functions of files: restore (TransMLA layout) → heal (budgets)."""

from __future__ import annotations

import logging
import shutil
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
from kvspec.models.load import load_model, use_threads
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
    threads: int | None = None,
) -> None:
    """Restore the Llama model in `model_dir` to DeepSeek-V3 attention at MLA rank `rank` and
    save it: the cache of a rank-r CARE model (2·r per token and layer, ``matched``) or
    kv_lora_rank r + the RoPE key (``official``)."""
    use_threads(threads)
    model, tok = load_model(model_dir)
    head_dim = getattr(model.config, "head_dim", None) or (
        model.config.hidden_size // model.config.num_attention_heads
    )
    per_group = rope_per_group(head_dim, freqfold, rope_width)
    spec = RestoreSpec(
        method=method,
        kv_lora_rank=latent_rank(model.config, rank, freqfold, cache, per_group),
        freqfold=freqfold,
        rope_per_group=per_group,
        schedule=schedule,
        care_alpha=factorize_opts["care_alpha"],
        care_lambda=factorize_opts["care_lambda"],
    )
    restored = restore_model(model, load_stats(stats_path).cov, spec)
    restored.config.kvspec_full_kv_per_token = kv_cache_widths(model)["full"]
    restored.generation_config = model.generation_config
    cache = kv_cache_per_token(restored.config)
    log.info(
        "%s: rank %d -> kv_lora_rank %d (%s) + RoPE key %d = %g cached numbers per token "
        "and layer; latent ranks per layer %s",
        method,
        rank,
        spec.kv_lora_rank,
        schedule,
        restored.config.qk_rope_head_dim,
        cache["per_layer"],
        getattr(restored.config, "kvspec_latent_ranks", None) or "uniform",
    )
    record = provenance(
        {
            "method": method,
            "rank": rank,
            "freqfold": freqfold,
            "cache": cache,
            "rope_per_group": per_group,
            "schedule": schedule,
            **factorize_opts,
        },
        source=model_dir,
        stats=stats_path,
        kv_cache=cache,
    )
    with atomic_path(out_dir) as tmp:
        restored.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / "kvspec_provenance.json", record)


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
    spec = HealSpec(**{**train_opts, "budgets": list(train_opts["budgets"])}, seed=seed)
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
