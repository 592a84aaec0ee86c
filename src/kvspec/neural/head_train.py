"""Training document 002's drafters against a frozen target: Mixture-of-Attentions heads
(`kvspec.neural.moa`) on the target's own K/V and hidden states, EAGLE heads
(`kvspec.neural.eagle`) on its features, Independent heads (`kvspec.neural.independent`) on its
next-token distributions only. The target stays frozen and is run on every sequence
(no generation during training, as the document). Sequences are prompt + the target's greedy
response (`kvspec.models.distil.Sequence`); the mirror has no UltraChat, so the target's own
responses to the SFT prompts stand in. Optimisation as the distilled drafts: AdamW (0.9, 0.95),
linear warmup then cosine, gradient clipping; `batch_size` sequences per step (accumulated one
at a time: sequences differ in length), resumable from a checkpoint.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from kvspec.devices import input_device, param_device
from kvspec.models.distil import DistilSpec, Sequence, batch_indices, lr_at
from kvspec.models.load import compute_dtype
from kvspec.models.optim import adamw, load_state, save_state
from kvspec.models.parallel import rank_and_world
from kvspec.neural.target_states import Readout, TargetStates
from kvspec.provenance import config_hash
from kvspec.seeds import derive, python_random

log = logging.getLogger(__name__)
KINDS = ("moa", "eagle", "independent")


@dataclass(frozen=True)
class HeadLoss:
    """The document's loss weights (Table 6) and the T-step bound's range for MoA."""

    lambda_kl: float = 0.1
    lambda_reg: float = 1.0
    periods: tuple[int, int] = (5, 15)


Loss = tuple[torch.Tensor, dict[str, float]]
States = Callable[[list[int]], TargetStates]  # a sequence's ids -> the target's states


def sequence_loss(kind: str, head: nn.Module, target: nn.Module, seq: Sequence,
                  rng: random.Random, weights: HeadLoss, states: States,
                  readout: Readout | None = None) -> Loss:  # fmt: skip
    """The loss of one sequence: MoA and Independent from its first learned position on,
    EAGLE on every position (its features are all the target's); over the tokens of
    `readout` (None: every token)."""
    ids = torch.tensor([seq.ids], dtype=torch.long, device=input_device(target))
    known = states(seq.ids)
    if kind == "independent":
        from kvspec.neural.independent import independent_loss

        return independent_loss(head, target, ids, seq.start, weights.lambda_kl, known,
                                readout)  # fmt: skip
    if kind == "moa":
        from kvspec.neural.moa import moa_loss

        return moa_loss(head, target, ids, seq.start, rng, weights.periods, weights.lambda_kl,
                        weights.lambda_reg, known, readout)  # fmt: skip
    from kvspec.neural.eagle import eagle_loss

    return eagle_loss(head, target, known.final, ids, weights.lambda_kl, weights.lambda_reg,
                      readout)  # fmt: skip


@torch.no_grad()
def evaluate(kind: str, head: nn.Module, target: nn.Module, val: list[Sequence],
             weights: HeadLoss, seed: int, states: States,
             readout: Readout | None = None) -> dict[str, float]:  # fmt: skip
    """Mean validation loss and top-1 agreement with the target (the same seeded
    verification periods at every evaluation)."""
    head.eval()
    rng = python_random(seed, "validation periods")
    parts = [sequence_loss(kind, head, target, s, rng, weights, states, readout)[1] for s in val]
    head.train()
    return {f"val_{k}": sum(p[k] for p in parts) / len(parts) for k in parts[0]}


def train_head(kind: str, head: nn.Module, target: nn.Module, train: list[Sequence],
               val: list[Sequence], spec: DistilSpec, weights: HeadLoss, states: States,
               checkpoint: str | Path | None = None,
               readout: Readout | None = None) -> list[dict[str, float]]:  # fmt: skip
    """Train `head` in place against the frozen `target`, whose states of a sequence
    `states` gives (e.g. `StateCache.get`), over the tokens of `readout` (None: every
    token); the curve (one row per evaluation).
    Resumes from `checkpoint` when it holds a state of the same settings.

    Data parallel when torch.distributed is initialised: each process takes every world-th
    sequence of a step, the gradients are summed over the processes, and the first process
    evaluates and writes the checkpoint; every random choice is a function of (seed, step,
    position in the step), so any number of processes trains the same head."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if not train:
        raise ValueError("no training sequences")
    for p in target.parameters():
        p.requires_grad_(False)
    rank, world = rank_and_world()
    torch.manual_seed(derive(spec.seed, "train"))
    opt = adamw(head, spec.lr, spec.weight_decay, betas=(0.9, 0.95))
    rows = None if readout is None else len(readout.weight)
    tag = config_hash([kind, asdict(spec), asdict(weights), len(train), rows])
    ckpt = Path(checkpoint) if checkpoint else None
    start, curve = load_state(ckpt, head, opt, tag)
    head.train()
    # tokens seen so far: a function of the step, so a resumed run counts on where it stopped
    t0 = time.perf_counter()
    tokens = sum(len(train[i].ids) for step in range(start)
                 for i in batch_indices(len(train), spec, step))  # fmt: skip
    for step in tqdm(range(start, spec.steps), desc=f"train {kind}", mininterval=10,
                     initial=start, total=spec.steps, disable=rank > 0):  # fmt: skip
        for group in opt.param_groups:
            group["lr"] = lr_at(step, spec)
        chunk = batch_indices(len(train), spec, step)
        sums: dict[str, float] = {}
        for at in range(rank, len(chunk), world):  # this process's share of the step
            seq = train[chunk[at]]
            rng = python_random(spec.seed, "periods", step, at)  # MoA's periods
            with compute_dtype(param_device(head), spec.dtype):  # weights, AdamW: float32
                loss, parts = sequence_loss(kind, head, target, seq, rng, weights, states,
                                            readout)  # fmt: skip
            (loss / len(chunk)).backward()
            sums = {k: sums.get(k, 0.0) + v for k, v in parts.items()}
        parts = _step_means(head, sums, len(chunk), world)
        tokens += sum(len(train[i].ids) for i in chunk)
        torch.nn.utils.clip_grad_norm_(head.parameters(), spec.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        done = step + 1
        if rank == 0 and (done % spec.eval_every == 0 or done == spec.steps):
            scores = (evaluate(kind, head, target, val, weights, spec.seed, states, readout)
                      if val else {})  # fmt: skip
            row = {"step": done, "lr": lr_at(step, spec),
                   **{f"train_{k}": v for k, v in parts.items()}, **scores, "tokens": tokens,
                   "seconds": time.perf_counter() - t0}  # fmt: skip
            curve.append(row)
            log.info("step %d %s", done, {k: round(v, 4) for k, v in row.items() if k != "step"})
        if rank == 0 and ckpt and done % spec.ckpt_every == 0 and done < spec.steps:
            save_state(ckpt, head, opt, done, curve, tag)
    return curve


def _step_means(head: nn.Module, sums: dict[str, float], n: int, world: int) -> dict[str, float]:
    """Sum the gradients of every process (each already divided by the step's sequence
    count) and return the step's mean loss parts over all its sequences."""
    if world == 1:
        return {k: v / n for k, v in sums.items()}
    import torch.distributed as dist

    for p in head.parameters():
        if p.requires_grad:
            if p.grad is None:  # a process whose sequences never reached this parameter
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
    keys = sorted(sums)
    totals = torch.tensor(
        [sums[k] for k in keys], dtype=torch.float64, device=param_device(head)
    )  # NCCL reduces on the GPU
    dist.all_reduce(totals)
    return {k: float(v) / n for k, v in zip(keys, totals, strict=True)}


def trainable_parameters(head: nn.Module) -> int:
    return sum(p.numel() for p in head.parameters() if p.requires_grad)


def decoder_layer_parameters(target: Any) -> int:
    """Parameters of one decoder layer of the target (the document sizes drafters by it)."""
    return sum(p.numel() for p in target.get_decoder().layers[0].parameters())
