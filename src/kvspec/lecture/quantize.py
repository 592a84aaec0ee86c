"""Weight quantization as in the lecture (section 2.3): round-to-nearest (RTN), mixed precision
that keeps the salient input channels in full precision, and AWQ's scaling trick.

Every method takes a quantizer (a function from weights to their quantized-dequantized
values), so the lecture's toy example (a grid of step 0.1) and a real model (asymmetric
integers per group of input channels) run through the same code. Saliency is measured on
activations: input channel j matters by mean |x_j| over calibration tokens (eq. 15).
AWQ: W' = Q(W·diag(s))·diag(s)⁻¹ with s = mean|x|^α (normalised), α searched on a grid to
minimise the layer's output error on calibration inputs; equal to scaling the input by 1/s
(eq. 16) and so exact before rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Quantizer = Callable[[torch.Tensor], torch.Tensor]


def grid_quantizer(step: float) -> Quantizer:
    """Round to the nearest multiple of `step` (the lecture's toy grid)."""
    return lambda w: torch.round(w / step) * step


def group_quantizer(bits: int, group: int) -> Quantizer:
    """Asymmetric min-max integers of `bits` per `group` consecutive input channels of each
    output row (the last group may be shorter), dequantized back to float."""
    levels = 2**bits - 1

    def quantize(w: torch.Tensor) -> torch.Tensor:  # (out, in)
        out = torch.empty_like(w)
        for j in range(0, w.shape[1], group):
            block = w[:, j : j + group]
            low, high = block.amin(1, keepdim=True), block.amax(1, keepdim=True)
            scale = ((high - low) / levels).clamp_min(1e-12)
            zero = torch.round(-low / scale)
            q = torch.clamp(torch.round(block / scale) + zero, 0, levels)
            out[:, j : j + group] = (q - zero) * scale
        return out

    return quantize


def rtn(w: torch.Tensor, quant: Quantizer) -> torch.Tensor:
    return quant(w)


def mixed(w: torch.Tensor, x_mag: torch.Tensor, quant: Quantizer, fraction: float) -> torch.Tensor:
    """RTN except the `fraction` of input channels with the largest mean |x| (at least one),
    which stay in full precision."""
    keep = torch.topk(x_mag, max(1, round(fraction * x_mag.numel()))).indices
    out = quant(w)
    out[:, keep] = w[:, keep]
    return out


def scaled(w: torch.Tensor, s: torch.Tensor, quant: Quantizer) -> torch.Tensor:
    """Q(W·diag(s))·diag(s)⁻¹: the effective weight when the input is divided by s."""
    return quant(w * s) / s


def awq_scales(x_mag: torch.Tensor, alpha: float) -> torch.Tensor:
    """s = mean|x|^α, normalised so that max·min = 1 (AWQ's normalisation)."""
    s = x_mag.clamp_min(1e-8) ** alpha
    return s / (s.max() * s.min()).sqrt()


def awq(w: torch.Tensor, x_mag: torch.Tensor, x: torch.Tensor, quant: Quantizer,
        grid: int) -> tuple[torch.Tensor, float]:  # fmt: skip
    """AWQ's search: the α in {0, 1/grid, …, (grid-1)/grid} whose scaled quantization gives
    the smallest output error ‖x·Wᵀ − x·W'ᵀ‖² on calibration inputs x (N, in)."""
    reference = x @ w.T  # (N, out)
    best: tuple[float, torch.Tensor, float] | None = None
    for i in range(grid):
        alpha = i / grid
        candidate = scaled(w, awq_scales(x_mag, alpha), quant)
        err = float(((x @ candidate.T - reference) ** 2).sum())
        if best is None or err < best[0]:
            best = (err, candidate, alpha)
    assert best is not None
    return best[1], best[2]


def toy_example(step: float, awq_scale: float, grid: int) -> list[dict[str, Any]]:
    """The lecture's dot product (section 2.3.3): x = [100, 1], w = [0.03, 0.03], a grid of
    `step`; RTN, mixed precision (the outlier channel kept), AWQ with the lecture's fixed s on
    the salient channel, and AWQ with our searched α."""
    x = torch.tensor([[100.0, 1.0]], dtype=torch.float64)  # (1, in)
    w = torch.tensor([[0.03, 0.03]], dtype=torch.float64)  # (out, in)
    quant, x_mag = grid_quantizer(step), x.abs().mean(0)
    fixed = torch.tensor([awq_scale, 1.0], dtype=torch.float64)
    searched, alpha = awq(w, x_mag, x, quant, grid)
    weights = {
        "full precision": w,
        "RTN": rtn(w, quant),
        "mixed precision": mixed(w, x_mag, quant, fraction=0.5),
        f"AWQ (s = {awq_scale:g} on the salient channel)": scaled(w, fixed, quant),
        f"AWQ (searched, alpha = {alpha:.2f})": searched,
    }
    return [{"method": name, "weights": wq[0].tolist(), "y": float(x @ wq[0])}
            for name, wq in weights.items()]  # fmt: skip


# ---- a real model -------------------------------------------------------------------------------
def decoder_linears(model: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """Every Linear inside the decoder layers (attention and MLP; not embeddings or head)."""
    layers = model.get_decoder().layers
    return {
        f"layers.{i}.{name}": module
        for i, layer in enumerate(layers)
        for name, module in layer.named_modules()
        if isinstance(module, torch.nn.Linear)
    }


class InputStats:
    """Per-Linear mean |x| per input channel and a seeded sample of input rows."""

    def __init__(self, linears: dict[str, torch.nn.Linear], rows: int, seed: int) -> None:
        self.linears, self.rows = linears, rows
        self.gen = torch.Generator().manual_seed(seed)
        self.abs_sum: dict[str, torch.Tensor] = {}
        self.count: dict[str, int] = {}
        self.sample: dict[str, list[torch.Tensor]] = {}

    def hook(self, name: str) -> Callable[..., None]:
        def record(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0].detach().reshape(-1, args[0].shape[-1]).double()  # (N, in)
            self.abs_sum[name] = self.abs_sum.get(name, 0) + x.abs().sum(0)
            self.count[name] = self.count.get(name, 0) + x.shape[0]
            pick = torch.randperm(x.shape[0], generator=self.gen)[: self.rows]
            self.sample.setdefault(name, []).append(x[pick].float())

        return record

    def magnitude(self, name: str) -> torch.Tensor:
        return (self.abs_sum[name] / self.count[name]).float()

    def inputs(self, name: str) -> torch.Tensor:
        x = torch.cat(self.sample[name])
        keep = torch.randperm(x.shape[0], generator=self.gen)[: self.rows]
        return x[keep]


@torch.inference_mode()
def collect_stats(model: torch.nn.Module, batches: list[torch.Tensor], rows: int,
                  seed: int) -> InputStats:  # fmt: skip
    """Run the calibration batches (each (B, T) token ids) with hooks on every decoder Linear."""
    stats = InputStats(decoder_linears(model), rows, seed)
    handles = [m.register_forward_pre_hook(stats.hook(n)) for n, m in stats.linears.items()]
    try:
        for ids in batches:
            model(input_ids=ids.to(model.device), use_cache=False, logits_to_keep=1)
    finally:
        for h in handles:
            h.remove()
    return stats


@torch.no_grad()
def quantize_model(model: torch.nn.Module, stats: InputStats, method: str, quant: Quantizer,
                   fraction: float, grid: int) -> dict[str, float]:  # fmt: skip
    """Replace every decoder Linear's weight in place by its `method` quantization (rtn, mixed,
    awq); return the chosen α per layer for awq (empty otherwise)."""
    alphas = {}
    for name, linear in stats.linears.items():
        w = linear.weight.data.float()
        if method == "rtn":
            new = rtn(w, quant)
        elif method == "mixed":
            new = mixed(w, stats.magnitude(name), quant, fraction)
        elif method == "awq":
            new, alphas[name] = awq(w, stats.magnitude(name), stats.inputs(name), quant, grid)
        else:
            raise ValueError(f"unknown quantization method {method!r}: rtn, mixed or awq")
        linear.weight.data.copy_(new.to(linear.weight.dtype))
    return alphas
