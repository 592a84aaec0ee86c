"""The target's features (final decoder output) of its forwards, for drafters that read them
(EAGLE, MoA's heads)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class FeatureTap:
    """Records the features (final decoder output) of the target's next forwards: `last` of
    the first sequence (T, H), `batch` of every sequence (B, T, H)."""

    def __init__(self, target: nn.Module) -> None:
        self.decoder = target.get_decoder()
        self.last: torch.Tensor | None = None
        self.batch: torch.Tensor | None = None

    def __enter__(self) -> FeatureTap:
        self._handle = self.decoder.register_forward_hook(self._keep)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _keep(self, _module: nn.Module, _args: Any, output: Any) -> None:
        self.batch = output.last_hidden_state.detach()  # (B, T, H)
        self.last = self.batch[0]  # (T, H)
