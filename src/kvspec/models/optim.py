"""Optimisation pieces shared by pretraining and healing: the warmup + cosine schedule, AdamW
with decay on matrices only, and a resumable training state tied to its configuration."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch

from kvspec.devices import to_cpu
from kvspec.io import atomic_path

log = logging.getLogger(__name__)


def warmup_cosine(
    step: int, peak: float, warmup_steps: int, decay_steps: int, floor_ratio: float
) -> float:
    """Linear warmup to `peak` over `warmup_steps`, then cosine to `floor_ratio·peak` over
    `decay_steps` (constant at the floor afterwards)."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, decay_steps))
    floor = floor_ratio * peak
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def adamw(
    model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float]
) -> torch.optim.AdamW:
    """AdamW over the trainable parameters, weight decay on matrices only (not norms/biases)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def save_state(path: Path, model, opt, step: int, curve: list[dict], tag: str) -> None:
    """Write model + optimizer state, step and curve atomically (a crash leaves the old one)."""
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}
    with atomic_path(path) as tmp:
        torch.save(to_cpu({**state, "curve": curve, "tag": tag}), tmp)


def load_state(path: Path | None, model, opt, tag: str) -> tuple[int, list[dict]]:
    """Restore a state written by `save_state` with the same `tag`; (0, []) otherwise."""
    if path is None or not path.exists():
        return 0, []
    state = torch.load(path, weights_only=False, map_location="cpu")
    if state.get("tag") != tag:
        log.info("ignoring state %s: it belongs to another configuration", path)
        return 0, []
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    log.info("resumed from %s at step %d", path, state["step"])
    return state["step"], state["curve"]
