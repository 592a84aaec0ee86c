"""How far the decode engine is from this CPU's memory bound, engine variants side by side.

    python -m kvspec.decoding.engine_cli [--model results/models/target] [--context 128]

Prints, measured in one run: the machine's read bandwidth (a large float32 sum) and the
bandwidth bound of one decode step (the weights' bytes over it); then for each engine variant
(PyTorch's float32 layers; bfloat16 weights, which this CPU multiplies with AVX512-BF16;
float32 with MKL-packed linear weights, the kernel inductor's weight freezing uses; the study's
engine `resources.linear: packed` / `packed-bf16`, `kvspec.decoding.packed`, with its fused
RMSNorm and with transformers' own) the
one-position step in ms and its multiple of the bound, and what a forward of q positions costs
as a multiple of the one-position step (`kvspec.decoding.verify_cost`, q interleaved). Variants
follow each other in this process; rerun to see the machine's drift.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from kvspec.decoding.verify_cost import verify_costs
from kvspec.lecture.roofline import measure_bandwidth
from kvspec.models.load import load_weights, weight_bytes

QS = (1, 2, 4, 8, 16)


@contextmanager
def packed_linears(model: torch.nn.Module) -> Iterator[None]:
    """Every nn.Linear of `model` computing through an MKL-packed copy of its weight."""
    # torch.ops.mkl: the op inductor's weight freezing emits; PyTorch has no public name for it
    patched = []
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and "forward" not in vars(module):
            packed = torch.ops.mkl._mkl_reorder_linear_weight(module.weight.detach(), 1)
            module.forward = _packed_forward(module, packed)
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward  # the class's forward again


@contextmanager
def module_norms(model: torch.nn.Module) -> Iterator[None]:
    """A packed model's RMSNorms computing through transformers' own forward again (what the
    kernel file's fused norm saves, side by side)."""
    from kvspec.decoding.packed import NORMS

    fused = {m: vars(m).pop("forward") for m in model.modules()
             if type(m).__name__ in NORMS and "forward" in vars(m)}  # fmt: skip
    try:
        yield
    finally:
        for module, forward in fused.items():
            module.forward = forward


def _packed_forward(module: torch.nn.Linear, packed: torch.Tensor):  # noqa: ANN202
    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])  # (N, in)
        out = torch.ops.mkl._mkl_linear(rows, packed, module.weight, module.bias, 1)
        return out.reshape(*x.shape[:-1], -1)

    return forward


def report(label: str, model: torch.nn.Module, context: list[int], bound_ms: float,
           repeats: int) -> None:  # fmt: skip
    costs = verify_costs(model, context, QS, repeats=repeats)
    step = costs[1] * 1e3
    ratios = "  ".join(f"q={q}: {costs[q] / costs[1]:.2f}x" for q in QS[1:])
    print(f"{label:<28} step {step:6.1f} ms = {step / bound_ms:4.1f}x the bound   {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="results/models/target")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    bandwidth = measure_bandwidth(512, 9)["sum_gb_s"]
    context = list(range(1000, 1000 + args.context))
    print(f"threads {torch.get_num_threads()}, read bandwidth {bandwidth:.1f} GB/s, "
          f"context {args.context}")  # fmt: skip
    for dtype in ("float32", "bfloat16"):
        bound_ms = weight_bytes(args.model, dtype) / (bandwidth * 1e9) * 1e3
        print(f"{dtype} weights: bandwidth bound of one step {bound_ms:.1f} ms")
        model = load_weights(args.model, dtype=dtype)
        report(f"{dtype}, eager", model, context, bound_ms, args.repeats)
        if dtype == "float32":
            with packed_linears(model):
                report("float32, MKL-packed linears", model, context, bound_ms, args.repeats)
        engine = {"float32": "packed", "bfloat16": "packed-bf16"}[dtype]  # kvspec's kernel
        model = load_weights(args.model, linear=engine)
        report(f"{engine} (resources.linear)", model, context, bound_ms, args.repeats)
        with module_norms(model):
            report(f"{engine}, transformers' norms", model, context, bound_ms, args.repeats)


if __name__ == "__main__":
    main()
