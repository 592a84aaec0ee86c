"""Where tensors live: a model's input device, and checkpoints written from any device.

At the paper scale models sit on GPUs (`resources.device: cuda`), one or several; every
tensor the package builds beside a model is built on that model's device, and everything it
saves goes to disk from the CPU, so a checkpoint written on a GPU loads on any machine.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def input_device(model: nn.Module) -> torch.device:
    """Where a model's input ids go: its input embedding's device (the first device of a
    model spread over several)."""
    return model.get_input_embeddings().weight.device


def param_device(module: nn.Module) -> torch.device:
    """The device of a module's first parameter (a head or draft: one device)."""
    return next(module.parameters()).device


def to_cpu(tree: Any) -> Any:
    """`tree` (nested dicts, lists, tuples) with every tensor copied to the CPU."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_cpu(v) for v in tree)
    return tree
