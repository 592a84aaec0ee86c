"""Healing after conversion (thesis 3.3.6): CE + KD fine-tuning of the converted student
against the original teacher, checkpointed at each token budget, resumable, with a validation
perplexity curve.

    L = L_CE + β·τ²·KL(softmax(z_T/τ) ‖ softmax(z_S/τ))        (3.13)-(3.15)

AdamW (β₁, β₂, weight decay on matrices), linear warmup then cosine, gradient clipping, and an
effective batch of micro_batch × accum × processes sequences. `accelerate` carries the same
loop from one CPU process to N data-parallel GPU processes in bf16: each process draws its own
slice of every step's seeded batch, gradients synchronise on the last micro-batch only, and
only the main process writes files. Everything random is a function of (seed, step), so a run
resumed from its state file continues the uninterrupted run's curve.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from kvspec.care.budgets import budget_steps
from kvspec.models.optim import adamw, load_state, save_state, warmup_cosine
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

    def __post_init__(self) -> None:
        if min(self.seq_len, self.micro_batch, self.accum, self.processes) < 1:
            raise ValueError("seq_len, micro_batch, accum and processes must be >= 1")
        if self.mixed_precision not in ("no", "bf16"):
            raise ValueError(f"mixed_precision must be 'no' or 'bf16', got {self.mixed_precision}")
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
    from accelerate import Accelerator

    acc = Accelerator(mixed_precision=spec.mixed_precision, cpu=not torch.cuda.is_available())
    torch.manual_seed(derive(spec.seed, "train"))
    teacher.requires_grad_(False)
    teacher = teacher.to(acc.device).eval()
    opt = make_optimizer(student, spec)
    tag = config_hash([asdict(spec), fingerprint])
    start, curve = load_state(Path(state_path) if state_path else None, student, opt, tag)
    model, opt = acc.prepare(student, opt)
    model.train()
    val = val_windows(val_tokens, spec)
    if not curve:
        curve.append(_row(0, spec, float("nan"), float("nan"), model, val, 0.0))
        curve[0]["teacher_val_ppl"] = val_perplexity(teacher, val, spec.micro_batch)
        log.info("step 0 (before healing): val ppl %.3f, teacher %.3f",
                 curve[0]["val_ppl"], curve[0]["teacher_val_ppl"])  # fmt: skip
    budget_at = budget_steps(spec.budgets, spec.tokens_per_step)
    end = spec.total_steps if stop_after is None else min(spec.total_steps, stop_after)
    t0 = time.perf_counter() - curve[-1]["seconds"]
    bar = tqdm(range(start, end), desc="heal", mininterval=10, initial=start,
               total=spec.total_steps, disable=not acc.is_main_process)  # fmt: skip
    for step in bar:
        ce, kd = _optimizer_step(model, teacher, opt, train_tokens, spec, step, acc)
        done = step + 1
        if done % spec.eval_every == 0 or done in budget_at:
            row = _row(done, spec, ce, kd, model, val, time.perf_counter() - t0)
            curve.append({**row, "teacher_val_ppl": curve[0]["teacher_val_ppl"]})
            bar.set_postfix(ce=f"{ce:.3f}", kd=f"{kd:.4f}", val_ppl=f"{row['val_ppl']:.2f}")
            log.info("step %d tokens %d ce %.4f kd %.5f val ppl %.3f",
                     done, row["tokens"], ce, kd, row["val_ppl"])  # fmt: skip
        if acc.is_main_process and done in budget_at:
            save_budget(budget_at[done], acc.unwrap_model(model))
        if acc.is_main_process and state_path and done % spec.ckpt_every == 0:
            save_state(Path(state_path), acc.unwrap_model(model), opt, done, curve, tag)
        acc.wait_for_everyone()
    return curve


def _optimizer_step(
    model, teacher, opt, tokens, spec: HealSpec, step: int, acc
) -> tuple[float, float]:
    """One optimizer step over `accum` micro-batches; returns this step's mean (CE, KD)."""
    for group in opt.param_groups:
        group["lr"] = lr_at(step, spec)
    ces, kds = [], []
    for micro in range(spec.accum):
        batch = sample_windows(tokens, spec, step, micro, acc.process_index).to(acc.device)
        sync = micro == spec.accum - 1
        with nullcontext() if sync else acc.no_sync(model), acc.autocast():
            loss, ce, kd = heal_loss(model, teacher, batch, spec)
            acc.backward(loss / spec.accum)
        ces.append(ce)
        kds.append(kd)
    acc.clip_grad_norm_(model.parameters(), spec.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(np.mean(ces)), float(np.mean(kds))


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
