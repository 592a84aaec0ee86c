"""Pretraining loop for the stand-in models: AdamW + warmup/cosine, seeded, resumable."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from kvspec.io import atomic_path
from kvspec.models.optim import adamw, load_state, save_state, warmup_cosine
from kvspec.provenance import config_hash
from kvspec.seeds import derive, numpy_generator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainSpec:
    """Optimisation settings (the `models.<name>.pretrain.train` block of the config)."""

    steps: int
    batch_size: int
    seq_len: int
    lr: float
    min_lr_ratio: float
    warmup_steps: int
    weight_decay: float
    grad_clip: float
    eval_every: int
    eval_batches: int
    ckpt_every: int
    seed: int

    @classmethod
    def from_config(cls, cfg: dict[str, Any], seed: int) -> TrainSpec:
        return cls(seed=seed, **cfg)


def lr_at(step: int, spec: TrainSpec) -> float:
    """Linear warmup to `lr`, then cosine decay to `min_lr_ratio * lr`."""
    decay = spec.steps - spec.warmup_steps
    return warmup_cosine(step, spec.lr, spec.warmup_steps, decay, spec.min_lr_ratio)


def sample_batch(tokens: np.ndarray, spec: TrainSpec, step: int) -> torch.Tensor:
    """(B, T) random windows; the seed depends only on (seed, step), so resuming repeats it.
    The model shifts labels itself, so inputs and labels are the same window."""
    rng = numpy_generator(spec.seed, "batch", step)
    starts = rng.integers(0, len(tokens) - spec.seq_len, size=spec.batch_size)
    windows = np.stack([tokens[s : s + spec.seq_len] for s in starts])
    return torch.from_numpy(windows.astype(np.int64))


@torch.no_grad()
def eval_loss(model: torch.nn.Module, tokens: np.ndarray, spec: TrainSpec) -> float:
    """Mean next-token loss on `eval_batches` fixed, evenly spaced held-out windows."""
    model.eval()
    n = spec.eval_batches * spec.batch_size
    starts = np.linspace(0, len(tokens) - spec.seq_len, n).astype(np.int64)
    losses = []
    for chunk in np.array_split(starts, spec.eval_batches):
        batch = torch.from_numpy(np.stack([tokens[s : s + spec.seq_len] for s in chunk]))
        batch = batch.long()
        losses.append(model(input_ids=batch, labels=batch).loss.item())
    model.train()
    return float(np.mean(losses))


def train(
    model: torch.nn.Module,
    train_tokens: np.ndarray,
    val_tokens: np.ndarray,
    spec: TrainSpec,
    checkpoint: str | Path | None = None,
    fingerprint: str = "",
) -> list[dict[str, float]]:
    """Train in place; return the loss curve (one row per eval point). Resumes from
    `checkpoint` if present (and made with the same spec and `fingerprint`, e.g. a hash of
    the architecture) and rewrites it every `ckpt_every` steps."""
    torch.manual_seed(derive(spec.seed, "train"))
    ckpt = Path(checkpoint) if checkpoint else None
    opt = adamw(model, spec.lr, spec.weight_decay, betas=(0.9, 0.95))
    tag = config_hash([asdict(spec), fingerprint])
    start, curve = load_state(ckpt, model, opt, tag)
    model.train()
    t0, tokens_per_step = time.perf_counter(), spec.batch_size * spec.seq_len
    bar = tqdm(
        range(start, spec.steps), desc="pretrain", mininterval=10, initial=start, total=spec.steps
    )
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, spec)
        batch = sample_batch(train_tokens, spec, step)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        opt.step()
        done = step + 1
        if done % spec.eval_every == 0 or done == spec.steps:
            row = {
                "step": done,
                "tokens": done * tokens_per_step,
                "lr": lr_at(step, spec),
                "train_loss": loss.item(),
                "val_loss": eval_loss(model, val_tokens, spec),
                "seconds": time.perf_counter() - t0,
            }
            curve.append(row)
            bar.set_postfix(loss=f"{row['train_loss']:.3f}", val=f"{row['val_loss']:.3f}")
            log.info(
                "step %d tokens %d train %.4f val %.4f",
                done,
                row["tokens"],
                row["train_loss"],
                row["val_loss"],
            )
        if ckpt and done % spec.ckpt_every == 0 and done < spec.steps:
            save_state(ckpt, model, opt, done, curve, tag)
    return curve


def pretrain_model(
    arch: dict[str, Any],
    train_cfg: dict[str, Any],
    seed: int,
    tokenizer_dir: str | Path,
    train_tokens: np.ndarray,
    val_tokens: np.ndarray,
    out_dir: str | Path,
    checkpoint: str | Path | None = None,
) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """Build, train and save (model + tokenizer, atomically) one stand-in model.
    Returns the loss curve and a summary (parameters, tokens seen, final losses, speed)."""
    from transformers import AutoTokenizer

    from kvspec.models.build import build_model, count_parameters

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    spec = TrainSpec.from_config(train_cfg, seed)
    model = build_model(arch, tokenizer, seed)
    n_params = count_parameters(model)
    log.info("model %s: %.2fM parameters", arch["family"], n_params / 1e6)
    t0 = time.perf_counter()
    curve = train(
        model,
        train_tokens,
        val_tokens,
        spec,
        checkpoint,
        fingerprint=config_hash([arch, len(tokenizer)]),
    )
    seconds = time.perf_counter() - t0
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    last = curve[-1]
    stats = {
        "family": arch["family"],
        "parameters": n_params,
        "steps": spec.steps,
        "tokens_seen": spec.steps * spec.batch_size * spec.seq_len,
        "final_train_loss": last["train_loss"],
        "final_val_loss": last["val_loss"],
        "train_seconds_this_run": seconds,
    }
    if checkpoint:
        Path(checkpoint).unlink(missing_ok=True)
    return curve, stats
