"""Healing after conversion (thesis 3.3.6): CE + KD fine-tuning of the converted student
against the original teacher, checkpointed at each token budget, resumable, with a validation
perplexity curve.

    L = L_CE + β·τ²·KL(softmax(z_T/τ) ‖ softmax(z_S/τ))        (3.13)-(3.15)

AdamW (β₁, β₂, weight decay on matrices), linear warmup then cosine, gradient clipping, and an
effective batch of micro_batch × accum × processes sequences. The same loop runs on one CPU
process or on N processes (`kvspec.care.engines`: replicated with accelerate, or FSDP-sharded in
bf16 with gradient checkpointing): each process draws its own slice of every step's seeded
batch, gradients synchronise on the last micro-batch only, and only the first process writes.
Everything random is a function of (seed, step), so a run resumed from its state file
continues the uninterrupted run's curve.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from kvspec.care.budgets import budget_steps
from kvspec.models.optim import adamw, warmup_cosine
from kvspec.provenance import config_hash
from kvspec.seeds import derive, numpy_generator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HealSpec:
    """Healing settings (the `care.heal.train` config block) and the token budgets."""

    budgets: list[int]  # tokens seen at each saved checkpoint (thesis: 1B, 3B)
    seq_len: int = 256
    micro_batch: int = 4
    accum: int = 16  # micro-batches per optimizer step (per process)
    lr: float = 2e-5
    min_lr_ratio: float = 0.1
    warmup_steps: int = 10
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    tau: float = 4.0
    beta: float = 0.5
    eval_every: int = 5
    eval_windows: int = 16
    ckpt_every: int = 5
    seed: int = 0
    mixed_precision: str = "no"  # "no" (CPU / fp32) or "bf16"
    processes: int = 1
    sharding: str = "ddp"  # over processes: "ddp" (a student per process) or "fsdp" (sharded)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass

    def __post_init__(self) -> None:
        if min(self.seq_len, self.micro_batch, self.accum, self.processes) < 1:
            raise ValueError("seq_len, micro_batch, accum and processes must be >= 1")
        if self.mixed_precision not in ("no", "bf16"):
            raise ValueError(f"mixed_precision must be 'no' or 'bf16', got {self.mixed_precision}")
        if self.sharding not in ("ddp", "fsdp"):
            raise ValueError(f"sharding must be 'ddp' or 'fsdp', got {self.sharding!r}")
        budget_steps(self.budgets, self.tokens_per_step)

    @property
    def sequences_per_step(self) -> int:
        return self.micro_batch * self.accum * self.processes

    @property
    def tokens_per_step(self) -> int:
        return self.sequences_per_step * self.seq_len

    def steps_for(self, budget: int) -> int:
        """Optimizer steps whose tokens reach `budget` (rounded to the nearest step)."""
        return round(budget / self.tokens_per_step)

    @property
    def total_steps(self) -> int:
        return self.steps_for(self.budgets[-1])


def lr_at(step: int, spec: HealSpec) -> float:
    """Linear warmup to `lr`, then cosine to `min_lr_ratio·lr` at the last step."""
    decay = spec.total_steps - 1 - spec.warmup_steps
    return warmup_cosine(step, spec.lr, spec.warmup_steps, decay, spec.min_lr_ratio)


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, tau: float) -> torch.Tensor:
    """Mean over positions of KL(softmax(z_T/τ) ‖ softmax(z_S/τ)) (thesis 3.14)."""
    t = F.log_softmax(teacher_logits.float() / tau, dim=-1)
    s = F.log_softmax(student_logits.float() / tau, dim=-1)
    return (t.exp() * (t - s)).sum(-1).mean()


def heal_loss(
    student: torch.nn.Module, teacher: torch.nn.Module, batch: torch.Tensor, spec: HealSpec
) -> tuple[torch.Tensor, float, float]:
    """(L, L_CE, L_KD) on one (B, T) batch; the teacher runs without gradients."""
    out = student(input_ids=batch, labels=batch)
    with torch.no_grad():
        teacher_logits = teacher(input_ids=batch).logits
    kd = kd_loss(out.logits, teacher_logits, spec.tau)
    loss = out.loss + spec.beta * spec.tau**2 * kd
    return loss, float(out.loss.detach()), float(kd.detach())


def sample_windows(tokens: np.ndarray, spec: HealSpec, step: int, micro: int, rank: int):
    """This process's (micro_batch, seq_len) windows of `step`; a function of (seed, step)."""
    rng = numpy_generator(spec.seed, "batch", step)
    starts = rng.integers(0, len(tokens) - spec.seq_len, size=spec.sequences_per_step)
    per_rank = spec.micro_batch * spec.accum
    mine = starts[rank * per_rank : (rank + 1) * per_rank]
    chosen = mine[micro * spec.micro_batch : (micro + 1) * spec.micro_batch]
    windows = np.stack([tokens[s : s + spec.seq_len] for s in chosen])
    return torch.from_numpy(windows.astype(np.int64))


def val_windows(tokens: np.ndarray, spec: HealSpec) -> torch.Tensor:
    """Fixed, evenly spaced held-out windows (eval_windows, seq_len)."""
    if len(tokens) <= spec.seq_len:
        raise ValueError(f"validation stream has {len(tokens)} tokens, need > {spec.seq_len}")
    starts = np.linspace(0, len(tokens) - spec.seq_len - 1, spec.eval_windows).astype(np.int64)
    return torch.from_numpy(
        np.stack([tokens[s : s + spec.seq_len] for s in starts]).astype(np.int64)
    )


def make_optimizer(model: torch.nn.Module, spec: HealSpec) -> torch.optim.Optimizer:
    """AdamW (spec.betas), weight decay on matrices only."""
    return adamw(model, spec.lr, spec.weight_decay, spec.betas)


@torch.no_grad()
@torch.no_grad()
def window_nll(model: torch.nn.Module, windows: torch.Tensor, micro_batch: int) -> np.ndarray:
    """Mean next-token CE of each validation window, (W,) float64."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    for chunk in windows.split(micro_batch):
        chunk = chunk.to(device)
        logits = model(input_ids=chunk).logits[:, :-1].float()  # (B, T-1, V)
        nll = F.cross_entropy(logits.transpose(1, 2), chunk[:, 1:], reduction="none")
        out.append(nll.mean(1).cpu())
    model.train(was_training)
    return torch.cat(out).double().numpy()


def val_perplexity(model: torch.nn.Module, windows: torch.Tensor, micro_batch: int) -> float:
    """exp(mean next-token CE) over the validation windows."""
    return float(math.exp(window_nll(model, windows, micro_batch).mean()))


def perplexity_with_se(nll: np.ndarray) -> tuple[float, float]:
    """(exp(mean NLL), its standard error by the delta method over windows)."""
    ppl = math.exp(float(nll.mean()))
    se = float(nll.std(ddof=1) / math.sqrt(len(nll))) if len(nll) > 1 else float("nan")
    return ppl, ppl * se


def heal(
    student: torch.nn.Module,
    teacher: torch.nn.Module,
    train_tokens: np.ndarray,
    val_tokens: np.ndarray,
    spec: HealSpec,
    save_budget,
    state_path: str | Path | None = None,
    fingerprint: str = "",
    stop_after: int | None = None,
) -> list[dict[str, float]]:
    """Heal `student` in place; call `save_budget(budget, unwrapped_model)` when a budget's
    step is reached (main process only). Returns the curve (step 0 = before healing).
    `stop_after` ends the run early after that many steps (to test crash and resume)."""
    from kvspec.care.engines import engine_for

    eng = engine_for(spec.mixed_precision, spec.sharding)
    torch.manual_seed(derive(spec.seed, "train"))
    teacher.requires_grad_(False)
    if spec.gradient_checkpointing:
        student.gradient_checkpointing_enable()
    tag = config_hash([asdict(spec), fingerprint])
    state = Path(state_path) if state_path else None
    model, teacher, opt, start, curve = eng.start(
        student, teacher, lambda m: make_optimizer(m, spec), state, tag
    )
    model.train()
    val = val_windows(val_tokens, spec)
    if not curve:
        curve.append(_row(0, spec, float("nan"), float("nan"), model, val, 0.0))
        with eng.evaluation():  # the teacher in the precision the student validates in
            curve[0]["teacher_val_ppl"] = val_perplexity(teacher, val, spec.micro_batch)
        log.info("step 0 (before healing): val ppl %.3f, teacher %.3f",
                 curve[0]["val_ppl"], curve[0]["teacher_val_ppl"])  # fmt: skip
    budget_at = budget_steps(spec.budgets, spec.tokens_per_step)
    end = spec.total_steps if stop_after is None else min(spec.total_steps, stop_after)
    t0 = time.perf_counter() - curve[-1]["seconds"]
    bar = tqdm(range(start, end), desc="heal", mininterval=10, initial=start,
               total=spec.total_steps, disable=eng.rank > 0)  # fmt: skip
    for step in bar:
        ce, kd = _optimizer_step(model, teacher, opt, train_tokens, spec, step, eng)
        done = step + 1
        if done % spec.eval_every == 0 or done in budget_at:
            row = _row(done, spec, ce, kd, model, val, time.perf_counter() - t0)
            curve.append({**row, "teacher_val_ppl": curve[0]["teacher_val_ppl"]})
            bar.set_postfix(ce=f"{ce:.3f}", kd=f"{kd:.4f}", val_ppl=f"{row['val_ppl']:.2f}")
            log.info("step %d tokens %d ce %.4f kd %.5f val ppl %.3f",
                     done, row["tokens"], ce, kd, row["val_ppl"])  # fmt: skip
        if done in budget_at:
            full = eng.full_model(model)  # collective when sharded
            if eng.rank == 0:
                save_budget(budget_at[done], full)
        if state and done % spec.ckpt_every == 0:
            eng.save_state(state, model, opt, done, curve, tag)
        eng.wait()
    return curve


def _optimizer_step(model, teacher, opt, tokens, spec: HealSpec, step: int, eng) -> tuple:
    """One optimizer step over `accum` micro-batches; this step's mean (CE, KD) over every
    micro-batch of every process."""
    for group in opt.param_groups:
        group["lr"] = lr_at(step, spec)
    ces, kds = [], []
    for micro in range(spec.accum):
        batch = sample_windows(tokens, spec, step, micro, eng.rank).to(eng.device)
        with eng.micro(model, sync=micro == spec.accum - 1):
            loss, ce, kd = heal_loss(model, teacher, batch, spec)
            eng.backward(loss / spec.accum)
        ces.append(ce)
        kds.append(kd)
    eng.clip(model, spec.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return eng.mean(float(np.mean(ces))), eng.mean(float(np.mean(kds)))


def _row(step: int, spec: HealSpec, ce: float, kd: float, model, val, seconds: float) -> dict:
    """A curve row; `val_nll` keeps the per-window NLLs for paired comparisons."""
    nll = window_nll(model, val, spec.micro_batch)
    ppl, se = perplexity_with_se(nll)
    return {
        "step": step,
        "tokens": step * spec.tokens_per_step,
        "lr": lr_at(max(step - 1, 0), spec) if step else 0.0,
        "train_ce": ce,
        "train_kd": kd,
        "val_ppl": ppl,
        "val_ppl_se": se,
        "seconds": seconds,
        "val_nll": nll.tolist(),
    }
