"""The study's CPU decode engine: every linear layer of a loaded model computing through one
batch-invariant kernel (`kernels/packed_linear.cpp`), float32 or bfloat16 weights, and its
RMSNorms through one fused function of the same file (one call instead of six PyTorch
operations: ~3.5 % of a SmolLM2 step).

PyTorch's CPU linear layers pick a different kernel for one row than for several (MKL's
one-row path is slow, oneDNN's bfloat16 products round differently for 1 and q rows), so a
one-token decoding step and a q-token verification neither cost nor compute the same. The
packed kernel streams each weight once for all rows and sums every output in one fixed order,
so a row's result does not depend on how many rows share the call: greedy decoding and every
drafter's verification compute the same numbers (tests/decoding/test_packed.py), and a
q-position forward costs little more than a one-position one while the weights stream from
memory.

Engines (`resources.linear`): "torch" (PyTorch's own layers, e.g. on GPUs), "packed"
(float32 weights), "packed-bf16" (weights rounded to bfloat16, activations and sums in
float32: half the bytes to stream, a slightly different model) and "packed-int8" (each output
row's weights as int8 times one float32 scale, max|row| / 127: a quarter of float32's bytes,
for models that only draft, where the weights, not the arithmetic, set a step's time). The
kernel is compiled on first use for this CPU (`-march=native`, ~30 s, cached under the torch
extensions directory with the CPU's flags in its name).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import torch

from kvspec.extensions import load_extension

ENGINES = ("torch", "packed", "packed-bf16", "packed-int8")
WEIGHTS = {"packed": torch.float32, "packed-bf16": torch.bfloat16, "packed-int8": torch.int8}
SOURCE = Path(__file__).parent / "kernels" / "packed_linear.cpp"
# -fopenmp: at::parallel_for is OpenMP in PyTorch's CPU builds; without it the loop runs on one
# thread (a header-only template, silently serial)
FLAGS = ["-O3", "-march=native", "-ffp-contract=fast", "-fopenmp"]


# transformers' SDPA attention copies every layer's keys and values to all query heads
# (`repeat_kv`) when a forward feeds several positions with a mask (a verification step); with
# this variable set it hands torch's SDPA the KV heads as grouped-query attention instead
# (`enable_gqa`). Bit-identical logits; SmolLM2 with a 256-token cache here: a 2 / 5 / 9-position
# forward 29.8 / 34.1 / 39.0 -> 27.3 / 32.4 / 37.3 ms, one position unchanged (2026-11-28).
# transformers reads it at every call, so setting it covers the whole process.
NATIVE_GQA = ("TRANSFORMERS_SDPA_FORCE_GQA", "1")


# RMSNorm classes whose forward the kernel's rms_norm computes: (eps attribute, the constant
# added to the weight: Llama-style w·x̂, Gemma-style (1 + w)·x̂)
NORMS = {
    "LlamaRMSNorm": ("variance_epsilon", 0.0),
    "Qwen2RMSNorm": ("variance_epsilon", 0.0),
    "Qwen3RMSNorm": ("variance_epsilon", 0.0),
    "Gemma3RMSNorm": ("eps", 1.0),
}


def check_engine(engine: str) -> None:
    """Raise for an engine name outside `ENGINES`."""
    if engine not in ENGINES:
        raise ValueError(f"resources.linear must be one of {list(ENGINES)}, got {engine!r}")


@cache
def kernel() -> Any:
    """The compiled kernel module (built once per CPU kind, then loaded from the cache)."""
    try:
        return load_extension("kvspec_packed_linear", SOURCE, FLAGS, ["-fopenmp"], cpu=True)
    except RuntimeError as err:
        raise RuntimeError(f"{err}, or resources.linear: torch") from None


def pack_linears(model: torch.nn.Module, engine: str) -> torch.nn.Module:
    """`model` (float32, on the CPU, for inference) with every nn.Linear (and reduced draft
    readout) computing through the packed kernel in `engine`'s weight dtype, and every RMSNorm
    of `NORMS` through the kernel file's norm (float32 weights); attention of several positions
    stops copying keys and values per query head (`NATIVE_GQA`, process-wide); "torch" leaves
    it unchanged.
    The layers keep their weights (code reading `.weight` still works) and stop
    requiring gradients: a packed model cannot be trained by mistake."""
    check_engine(engine)
    if engine == "torch":
        return model
    os.environ[NATIVE_GQA[0]] = NATIVE_GQA[1]
    for module in model.modules():
        if "forward" in vars(module) or "reduced" in vars(module):
            continue  # packed already (a target's layer a head holds)
        if type(module).__name__ in NORMS:
            module.requires_grad_(False)
            module.forward = _norm_forward(module)
            continue
        if not isinstance(module, torch.nn.Linear) and not _is_readout(module):
            continue
        weight = module.weight
        if weight.device.type != "cpu" or weight.dtype != torch.float32:
            raise ValueError(
                f"resources.linear {engine!r} packs float32 CPU weights, got "
                f"{weight.dtype} on {weight.device}; use resources.linear: torch"
            )
        module.requires_grad_(False)
        packed = pack_weight(weight.detach(), engine)
        module.packed_weight = packed  # what kvspec.decoding.lean's one-call step reads
        compute = _forward(packed, weight.shape[0], getattr(module, "bias", None))
        setattr(module, "reduced" if _is_readout(module) else "forward", compute)
    model.linear_engine = engine  # engine_of: what layers built later for it should use
    return model


def pack_weight(weight: torch.Tensor, engine: str) -> torch.Tensor:
    """A float32 (out, in) weight as the kernel's panels in `engine`'s weight format."""
    if WEIGHTS[engine] == torch.int8:
        return kernel().pack_int8(weight)
    return kernel().pack(weight.to(WEIGHTS[engine]))


def as_computed(weight: torch.Tensor, engine: str) -> torch.Tensor:
    """The float32 weight `engine` multiplies by in place of `weight` (rounded to bfloat16, or
    int8 times each row's scale): what the kernel's products equal to float32 accuracy."""
    if WEIGHTS[engine] != torch.int8:
        return weight.to(WEIGHTS[engine]).float()
    peak = weight.abs().amax(dim=1, keepdim=True)
    scale = torch.where(peak > 0, peak / 127.0, torch.ones_like(peak))
    return (weight / scale).round().clamp(-127, 127) * scale


def engine_of(model: torch.nn.Module) -> str:
    """The engine `model`'s linear layers were packed in ("torch" if never packed)."""
    return getattr(model, "linear_engine", "torch")


def _is_readout(module: torch.nn.Module) -> bool:
    """A reduced draft readout (`kvspec.models.draft_vocab.ReducedHead`): its subset's logits
    come from `reduced`, a product with its (N, hidden) weight."""
    return (
        callable(getattr(module, "reduced", None)) and getattr(module, "weight", None) is not None
    )


def _norm_forward(module: torch.nn.Module):  # noqa: ANN202
    """`module`'s RMSNorm through the kernel, checked once against its own forward (a
    transformers release that changed the norm's formula is refused, not silently run)."""
    eps_name, offset = NORMS[type(module).__name__]
    eps = float(getattr(module, eps_name))
    weight = (module.weight.detach().float() + offset).contiguous()
    run = kernel().rms_norm
    probe = torch.randn(3, weight.numel(), generator=torch.Generator().manual_seed(0))
    if not torch.allclose(run(probe, weight, eps), module(probe), rtol=1e-5, atol=1e-6):
        raise RuntimeError(f"{type(module).__name__}'s forward no longer matches the packed "
                           "engine's RMSNorm; use resources.linear: torch")  # fmt: skip

    def forward(x: torch.Tensor) -> torch.Tensor:
        return run(x, weight, eps)

    module.packed_norm = (weight, eps)  # the weight as applied, and eps (kvspec.decoding.lean)
    return forward


def _forward(packed: torch.Tensor, out_features: int, bias: torch.Tensor | None):  # noqa: ANN202
    run = kernel().linear

    def forward(x: torch.Tensor) -> torch.Tensor:
        y = run(x, packed, out_features)
        return y if bias is None else y.add_(bias)

    return forward
