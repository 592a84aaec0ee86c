"""A second torch device on a machine without a GPU, for the paper scale's device paths.

PyTorch's lazy-tensor backend (TorchScript, in every CPU wheel) keeps tensors on device
"lazy:0" and refuses an operation that mixes them with CPU tensors ("Input tensor is not a
lazy tensor"), as CUDA refuses a CUDA tensor beside a CPU one. Code that builds a tensor
without its model's device, or saves and loads tensors in ways only the CPU allows, fails
here the way it fails on a GPU at the paper scale (`resources.device: cuda`).

Three gaps of the backend itself, none about placement, are bridged while the fixture is
active: inference mode runs as no_grad (lazy tensors have no inference-mode views),
iterating over a tensor indexes it row by row (the backend's `unbind` hands back rows whose
next operation runs on the CPU), and `aten::mul` runs eagerly (the TorchScript backward of a
Python-scalar product mixes float32 and float64).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
import torch

DEVICE = "lazy"


class _NoGrad:
    def __init__(self, *_: object) -> None:
        self._mode = torch.no_grad()

    def __enter__(self) -> None:
        self._mode.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)


@functools.cache
def _backend() -> None:
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()  # once per process


@pytest.fixture()
def second_device(monkeypatch) -> Iterator[str]:
    """The device name ("lazy"); every model and head of the test goes there."""
    _backend()
    monkeypatch.setattr(torch._C, "_InferenceMode", _NoGrad)
    monkeypatch.setattr(torch.Tensor, "__iter__", lambda t: (t[i] for i in range(len(t))))
    before = torch._C._lazy._get_force_fallback()
    torch._C._lazy._set_force_fallback("aten::mul")
    try:
        yield DEVICE
    finally:
        torch._C._lazy._set_force_fallback(before)


def on_device(tree: object) -> set[str]:
    """The device types of every tensor in a nested dict / list / tuple."""
    if isinstance(tree, torch.Tensor):
        return {tree.device.type}
    parts = tree.values() if isinstance(tree, dict) else tree
    if isinstance(tree, (dict, list, tuple)):
        return set().union(*(on_device(p) for p in parts))
    return set()
