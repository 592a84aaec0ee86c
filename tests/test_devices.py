"""Where tensors live: a checkpoint written from a model's device holds CPU tensors only."""

from __future__ import annotations

import torch

from kvspec.devices import input_device, param_device, to_cpu

from .second_device import on_device
from .tiny import tiny_llama


def test_a_tree_of_device_tensors_reaches_the_cpu_with_its_values(second_device) -> None:
    model = tiny_llama(0).to(second_device)
    assert input_device(model).type == param_device(model).type == second_device
    tree = {"state": model.state_dict(), "steps": [torch.ones(2, device=second_device), 3],
            "name": "x"}  # fmt: skip
    assert on_device(tree) == {second_device}
    moved = to_cpu(tree)
    assert on_device(moved) == {"cpu"} and moved["name"] == "x" and moved["steps"][1] == 3
    for key, value in tiny_llama(0).state_dict().items():
        torch.testing.assert_close(moved["state"][key], value, rtol=0, atol=0)
