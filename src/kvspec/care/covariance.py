"""Calibration statistics of the K/V projection inputs: covariance C and per-channel mean |x|.

A forward hook on each decoder layer's ``self_attn.k_proj`` sees the attention input after the
input RMSNorm (k_proj and v_proj share it), in Llama, Qwen3 and Gemma3 alike. Only running sums
are kept, in float64, so memory is O(L·d²) however many calibration tokens go through:

    C = Σ_tokens xᵀx / count       (CARE)        mean_abs = Σ_tokens |x| / count   (ASVD)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from tqdm.auto import tqdm

from kvspec.io import atomic_path


@dataclass
class CovarianceStats:
    """Per-layer input statistics of the K/V projections (float64)."""

    cov: list[Tensor]  # L × (d, d): E[xᵀx]
    mean_abs: list[Tensor]  # L × (d,): E[|x|]
    count: int  # tokens seen per layer

    @property
    def num_layers(self) -> int:
        return len(self.cov)


class RunningMoments:
    """Running Σ xᵀx and Σ |x| over rows of x; memory independent of the number of rows."""

    def __init__(self, dim: int) -> None:
        self.xtx = torch.zeros(dim, dim, dtype=torch.float64)  # (d, d)
        self.abs_sum = torch.zeros(dim, dtype=torch.float64)  # (d,)
        self.count = 0

    def update(self, x: Tensor) -> None:
        """Add the rows of x (..., d)."""
        rows = x.detach().reshape(-1, x.shape[-1]).to(device="cpu", dtype=torch.float64)  # (N, d)
        self.xtx += rows.T @ rows
        self.abs_sum += rows.abs().sum(0)
        self.count += rows.shape[0]

    def covariance(self) -> Tensor:
        """E[xᵀx] (uncentred, as in the activation-error objective)."""
        return self.xtx / max(self.count, 1)

    def mean_abs(self) -> Tensor:
        """E[|x|] per channel."""
        return self.abs_sum / max(self.count, 1)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a HF Llama/Qwen3/Gemma3 causal LM (``model.model.layers``).

    In all three, k_proj and v_proj read the layer's input_layernorm output (Gemma3's extra
    norms sit after attention and around the MLP), which is what the hook captures."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not all(
        hasattr(getattr(layer, "self_attn", None), "k_proj") for layer in layers
    ):
        raise ValueError(
            f"{type(model).__name__} is not a Llama/Qwen3-style model (the layout Llama, Qwen3 "
            "and Gemma3 share: model.layers[i].self_attn.k_proj)"
        )
    return layers


@contextmanager
def _kproj_hooks(model: nn.Module, moments: list[RunningMoments]) -> Iterator[None]:
    """Register input hooks on every k_proj for the duration of the block."""

    def hook_for(acc: RunningMoments):
        def hook(_module: nn.Module, args: tuple[Tensor, ...]) -> None:
            acc.update(args[0])  # (B, T, d): normed attention input

        return hook

    handles = [
        layer.self_attn.k_proj.register_forward_pre_hook(hook_for(acc))
        for layer, acc in zip(decoder_layers(model), moments, strict=True)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def collect_covariances(
    model: nn.Module, batches: Iterable[Tensor], progress: bool = True
) -> CovarianceStats:
    """Run `batches` of token ids (B, T) through `model` and return the K/V input statistics.

    Sequences are taken as unpadded: every position counts as a calibration token.
    """
    layers = decoder_layers(model)
    moments = [RunningMoments(layer.self_attn.k_proj.in_features) for layer in layers]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with _kproj_hooks(model, moments):
            for ids in tqdm(batches, desc="covariance", disable=not progress):
                model(input_ids=ids.to(device), use_cache=False)
    finally:
        model.train(was_training)
    if moments[0].count == 0:
        raise ValueError("no calibration tokens: `batches` was empty")
    return CovarianceStats(
        cov=[m.covariance() for m in moments],
        mean_abs=[m.mean_abs() for m in moments],
        count=moments[0].count,
    )


def save_stats(
    stats: CovarianceStats, path: str | os.PathLike[str], meta: dict[str, str] | None = None
) -> None:
    """Write `stats` to one safetensors file (`meta`: extra string metadata, e.g. provenance).

    Keys: ``layer.{i}.cov`` (d, d), ``layer.{i}.mean_abs`` (d,) and ``count`` (1,).
    """
    tensors = {"count": torch.tensor([stats.count], dtype=torch.int64)}
    for i, (cov, mean_abs) in enumerate(zip(stats.cov, stats.mean_abs, strict=True)):
        tensors[f"layer.{i}.cov"] = cov.contiguous()
        tensors[f"layer.{i}.mean_abs"] = mean_abs.contiguous()
    metadata = {**(meta or {}), "num_layers": str(stats.num_layers)}
    metadata["format"] = "kvspec.care.covariance/1"
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def load_stats(path: str | os.PathLike[str]) -> CovarianceStats:
    """Read statistics written by `save_stats`."""
    tensors = load_file(str(path))
    n = sum(1 for key in tensors if key.endswith(".cov"))
    missing = [
        k for i in range(n) for k in (f"layer.{i}.cov", f"layer.{i}.mean_abs") if k not in tensors
    ]
    if "count" not in tensors or missing:
        raise ValueError(
            f"{path} is not a covariance-statistics file (missing {missing or ['count']})"
        )
    return CovarianceStats(
        cov=[tensors[f"layer.{i}.cov"] for i in range(n)],
        mean_abs=[tensors[f"layer.{i}.mean_abs"] for i in range(n)],
        count=int(tensors["count"][0]),
    )
