"""A distilled draft's temperature: the τ that maximises its overlap with the teacher,
folded into its output layer.

Distillation leaves a draft under-confident: dividing its logits by τ < 1 raises
α = Σ_x min(p_T(x), q(x)), the acceptance rate of speculative sampling at T = 1 (measured on
`draft`, docs/drafts.md). τ is fit on training sequences only, over a grid, against the
teacher's cached top-k log-probs (the lower bound of α that `distil.evaluate` reports as
`val_alpha`). Folding 1/τ into the output layer's rows makes the calibrated draft an ordinary
model (every drafter, sampler and engine reads it unchanged); its argmax is unchanged, so greedy
drafting drafts the same tokens, and sampling stays exact for any draft distribution.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn
from tqdm import tqdm

from kvspec.models.draft_vocab import readout_logits, reduced_head
from kvspec.models.kd_targets import Targets, batch_targets, restrict_targets
from kvspec.models.load import compute_dtype
from kvspec.models.packing import make_batch

if TYPE_CHECKING:
    from kvspec.models.distil import Sequence as Seq

log = logging.getLogger(__name__)


@torch.no_grad()
def overlap_by_temperature(
    student: nn.Module,
    seqs: list[Seq],
    targets: Mapping[str, Targets],
    temperatures: Sequence[float],
    batch_size: int = 8,
    pad_id: int = 0,
    dtype: str = "float32",
) -> dict[float, float]:
    """Token-weighted mean of Σ min(p_T, q_τ) over the teacher's top-k tokens of `seqs`
    (q_τ = softmax(z / τ) of the student's logits z) for each τ in `temperatures`; the
    student's forward in `dtype` (bfloat16: under autocast, as it trained; on `draft` the
    overlaps move by < 5e-5 and the fit takes 17.7 s instead of 35.2, 2026-12-06)."""
    if not seqs:
        raise ValueError("no sequences to fit a temperature on")
    was_training = student.training
    student.eval()
    head = reduced_head(student)
    to_draft = head.to_draft() if head else None
    sums, total = dict.fromkeys(temperatures, 0.0), 0
    for i in tqdm(range(0, len(seqs), batch_size), desc="calibrate", mininterval=10):
        chunk = seqs[i : i + batch_size]
        batch = make_batch(chunk, pad_id).to(student.device)
        with compute_dtype(student.device, dtype):
            hidden = batch.hidden(student)
            logits = readout_logits(student, batch.learned(hidden)).float()
        everything = torch.ones(len(logits), dtype=torch.bool, device=logits.device)
        tgt = restrict_targets(batch_targets(targets, chunk, student.device), everything, to_draft)
        for tau, value in _overlaps(logits, tgt, temperatures).items():
            sums[tau] += value
        total += len(logits)
    student.train(was_training)
    return {tau: s / max(1, total) for tau, s in sums.items()}


def _overlaps(
    logits: torch.Tensor, tgt: Targets, temperatures: Sequence[float], rows: int = 64
) -> dict[float, float]:
    """Σ over rows of Σ min(p_T, q_τ) for each τ: `kd_targets.overlap` of log_softmax(z / τ),
    with the student's log-probs formed only at the teacher's top-k tokens (a logsumexp per
    row), every τ on one block of `rows` rows while it is in cache (64 rows: 5x faster than
    whole-batch passes on the AMD EPYC, 2026-12-06)."""
    t_ids, t_logp, _ = tgt
    picked, teacher_p = logits.gather(-1, t_ids), t_logp.exp()  # (n, k)
    out = dict.fromkeys(temperatures, 0.0)
    for i in range(0, len(logits), rows):
        z, p, q = logits[i : i + rows], picked[i : i + rows], teacher_p[i : i + rows]
        for tau in temperatures:
            logq = p / tau - torch.logsumexp(z / tau, dim=-1, keepdim=True)
            out[tau] += float(torch.minimum(q, logq.exp()).sum())
    return out


def best_temperature(alphas: Mapping[float, float]) -> float:
    """The τ of the largest overlap; among equal ones the closest to 1 (no change)."""
    return max(alphas, key=lambda tau: (alphas[tau], -abs(tau - 1.0)))


def fold_temperature(model: nn.Module, tau: float) -> None:
    """Divide `model`'s output logits by `tau` for good: its output layer's weight (and bias)
    are scaled by 1/τ; a layer tied to the input embedding is untied first."""
    if tau <= 0:
        raise ValueError(f"temperature must be positive, got {tau}")
    untie_output(model)
    layer = model.get_output_embeddings()
    with torch.no_grad():
        layer.weight.div_(tau)
        if getattr(layer, "bias", None) is not None:
            layer.bias.div_(tau)


def untie_output(model: nn.Module) -> None:
    """Give `model` an output layer of its own when it shares the input embedding's weight
    (a copy of it; the config says so, so a saved model reloads untied)."""
    layer = model.get_output_embeddings()
    if layer.weight is model.get_input_embeddings().weight:
        layer.weight = nn.Parameter(layer.weight.detach().clone())
        model.config.tie_word_embeddings = False
        if hasattr(model.config, "get_text_config"):
            model.config.get_text_config().tie_word_embeddings = False


def calibrate(
    student: nn.Module,
    seqs: list[Seq],
    targets: Mapping[str, Targets],
    temperatures: Sequence[float],
    batch_size: int = 8,
    pad_id: int = 0,
    dtype: str = "float32",
) -> dict[str, object]:
    """Fit τ on `seqs` (training sequences) with the student's forward in `dtype`, fold it
    into `student`; the fit's record."""
    alphas = overlap_by_temperature(student, seqs, targets, temperatures, batch_size, pad_id,
                                    dtype)  # fmt: skip
    tau = best_temperature(alphas)
    fold_temperature(student, tau)
    log.info("draft temperature %.3g: fit overlap %.4f (%.4f at 1)", tau, alphas[tau],
             alphas.get(1.0, float("nan")))  # fmt: skip
    return {"temperature": tau, "sequences": len(seqs),
            "fit_alpha": {str(t): a for t, a in alphas.items()}}  # fmt: skip
