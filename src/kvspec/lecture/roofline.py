"""Arithmetic intensity by the lecture's formulas, and this machine's measured roofline.

The lecture counts FLOPs and bytes per operation (eqs. 1-14): a linear layer's intensity
tends to the batch size, the SwiGLU MLP's to B·T, attention's stays near 1 at decode whatever
the batch. A machine's ridge point is peak FLOP/s over bandwidth (an H100: 989e12 / 3.35e12
≈ 295). Here the ridge is measured: achieved GFLOP/s of matrix products of rising intensity
and the bandwidth of a large copy and a large sum, medians of repeats.
"""

from __future__ import annotations

from typing import Any

import torch

from kvspec.timing import median_seconds

H100_PEAK_FLOPS = 989e12  # lecture eq. (5), dense bf16
H100_BANDWIDTH = 3.35e12  # bytes/s


def ridge(peak_flops: float, bandwidth: float) -> float:
    """FLOPs per byte at which a machine turns from memory- to compute-limited."""
    return peak_flops / bandwidth


def linear_intensity(b: int, d: int, f: int, bytes_per: int = 2) -> float:
    """(B, D) @ (D, F): 2BDF FLOPs over reading X and W and writing Y (eq. 3)."""
    return 2 * b * d * f / (bytes_per * (b * d + d * f + b * f))


def mlp_intensity(b: int, t: int, d: int, f: int, bytes_per: int = 2) -> float:
    """SwiGLU MLP on (B, T, D) with three D x F weights (eq. 10, bf16 when bytes_per = 2)."""
    tokens = b * t
    return 6 * tokens * d * f / (bytes_per * (2 * tokens * d + 2 * tokens * f + 3 * d * f))


def attention_intensity_lecture(s: int, t: int) -> float:
    """The lecture's simplification S·T / (S + T) (eqs. 12-13)."""
    return s * t / (s + t)


def attention_intensity(s: int, t: int, heads: int, kv_heads: int, head_dim: int,
                        bytes_per: int = 2) -> float:  # fmt: skip
    """Q·Kᵀ and P·V for T new tokens over S cached ones, per layer: 4·T·S·d·heads FLOPs over
    reading K and V (kv_heads of them) and reading Q / writing the output (heads of them).
    At decode (T = 1) this is about 2·heads / (bytes·kv_heads): GQA's group size, not B."""
    flops = 4 * t * s * head_dim * heads
    moved = bytes_per * (2 * s * head_dim * kv_heads + 2 * t * head_dim * heads)
    return flops / moved


def measure_bandwidth(megabytes: int, repeats: int) -> dict[str, float]:
    """GB/s of a copy (read + write) and a sum (read) over a float32 array of `megabytes`."""
    n = megabytes * 2**20 // 4
    src, dst = torch.rand(n), torch.empty(n)
    copy = median_seconds(lambda: dst.copy_(src), repeats)
    total = median_seconds(lambda: src.sum(), repeats)
    return {"copy_gb_s": 2 * 4 * n / copy / 1e9, "sum_gb_s": 4 * n / total / 1e9}


def measure_matmul(b: int, d: int, f: int, repeats: int, seed: int) -> dict[str, float]:
    """Achieved GFLOP/s of (B, D) @ (D, F) in float32, with its intensity (4-byte numbers)."""
    gen = torch.Generator().manual_seed(seed)
    x, w = torch.randn(b, d, generator=gen), torch.randn(d, f, generator=gen)
    out = torch.empty(b, f)
    seconds = median_seconds(lambda: torch.matmul(x, w, out=out), repeats)
    return {
        "b": b, "d": d, "f": f, "seconds": seconds,
        "intensity": linear_intensity(b, d, f, bytes_per=4),
        "gflop_s": 2 * b * d * f / seconds / 1e9,
    }  # fmt: skip


def measure_roofline(
    batch_sizes: list[int], d: int, f: int, megabytes: int, repeats: int, seed: int
) -> dict[str, Any]:
    """Matmuls of the model's MLP shape at each batch size, bandwidth, and the ridge point."""
    points = [measure_matmul(b, d, f, repeats, seed) for b in batch_sizes]
    bandwidth = measure_bandwidth(megabytes, repeats)
    peak = max(p["gflop_s"] for p in points) * 1e9
    best_bw = max(bandwidth.values()) * 1e9
    return {"matmul": points, "bandwidth": bandwidth, "peak_gflop_s": peak / 1e9,
            "bandwidth_gb_s": best_bw / 1e9, "ridge": ridge(peak, best_bw)}  # fmt: skip


def intensity_rows(dims: dict[str, int], batch_sizes: list[int], prompt_lengths: list[int],
                   context: int) -> list[dict[str, Any]]:  # fmt: skip
    """The lecture's intensities (bf16 bytes, as the lecture counts) for a model's shapes:
    MLP and attention at decode (T = 1, batch B) and at prefill (B = 1, T = S)."""
    d, f = dims["hidden"], dims["intermediate"]
    heads, kv, hd = dims["heads"], dims["kv_heads"], dims["head_dim"]
    rows = []
    for b in batch_sizes:
        rows.append({"phase": "decode", "B": b, "T": 1, "S": context,
                     "mlp": mlp_intensity(b, 1, d, f),
                     "attention_lecture": attention_intensity_lecture(context, 1),
                     "attention_gqa": attention_intensity(context, 1, heads, kv, hd)})  # fmt: skip
    for s in prompt_lengths:
        rows.append({"phase": "prefill", "B": 1, "T": s, "S": s,
                     "mlp": mlp_intensity(1, s, d, f),
                     "attention_lecture": attention_intensity_lecture(s, s),
                     "attention_gqa": attention_intensity(s, s, heads, kv, hd)})  # fmt: skip
    return rows
