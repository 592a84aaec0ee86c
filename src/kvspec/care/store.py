"""Files of the CARE stages: full-rank factors + spectra (safetensors), rank plans (JSON).

A factors file holds, for every layer i and matrix m in {k, v}: ``layer.{i}.{m}.a`` (d, k),
``layer.{i}.{m}.b`` (k, out) and ``layer.{i}.{m}.spectrum`` (k,) float64, the singular values of
the matrix the method decomposed (they drive water-filling and Figure 3.3).
A rank plan is JSON with ``ranks_k``/``ranks_v`` (one per layer) and optional ``drop_k``/
``drop_v`` (component indices removed per layer), plus how it was made.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from kvspec.care.factorize import Factors
from kvspec.io import atomic_path, read_json


def save_factors(
    factors: list[Factors], path: str | os.PathLike[str], meta: dict[str, str]
) -> None:
    """Write factors ordered [K_0, V_0, K_1, ...] to one safetensors file."""
    tensors: dict[str, Tensor] = {}
    for i, f in enumerate(factors):
        prefix = f"layer.{i // 2}.{'kv'[i % 2]}"
        tensors[f"{prefix}.a"] = f.a.contiguous()
        tensors[f"{prefix}.b"] = f.b.contiguous()
        tensors[f"{prefix}.spectrum"] = f.spectrum.to(torch.float64).contiguous()
    meta = {**meta, "num_layers": str(len(factors) // 2), "format": "kvspec.care.factors/1"}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def load_factors(path: str | os.PathLike[str]) -> list[Factors]:
    """Factors [K_0, V_0, K_1, ...] written by `save_factors`."""
    tensors = load_file(str(path))
    n = sum(1 for k in tensors if k.endswith(".k.a"))
    keys = [f"layer.{i}.{m}" for i in range(n) for m in "kv"]
    missing = [k for k in keys for part in ("a", "b", "spectrum") if f"{k}.{part}" not in tensors]
    if n == 0 or missing:
        raise ValueError(f"{path} is not a factors file (missing {missing or 'every layer'})")
    return [
        Factors(a=tensors[f"{k}.a"], b=tensors[f"{k}.b"], spectrum=tensors[f"{k}.spectrum"])
        for k in keys
    ]


def spectra(factors: list[Factors]) -> list[Tensor]:
    """The singular values of every matrix, [K_0, V_0, K_1, ...]."""
    return [f.spectrum for f in factors]


def plan_record(ranks: list[int], **extra: Any) -> dict[str, Any]:
    """A rank plan from an interleaved [K_0, V_0, ...] rank list."""
    if len(ranks) % 2:
        raise ValueError(f"expected an interleaved [K_0, V_0, ...] list, got {len(ranks)} ranks")
    return {"ranks_k": list(ranks[0::2]), "ranks_v": list(ranks[1::2]), **extra}


def load_plan(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A rank plan; checks that K and V lists cover the same layers."""
    plan = read_json(path)
    for key in ("ranks_k", "ranks_v"):
        if key not in plan:
            raise ValueError(f"{path}: rank plan lacks {key!r}")
    if len(plan["ranks_k"]) != len(plan["ranks_v"]):
        raise ValueError(f"{path}: ranks_k and ranks_v cover different numbers of layers")
    return plan
