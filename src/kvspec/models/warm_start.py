"""A draft started from another, already distilled draft of the same teacher.

Both are cut from the teacher (`init: target`): the new draft keeps the teacher's `layers`, the
trained one kept a subset of them. Every layer they share is taken from the trained draft (its
distilled weights), the others stay the teacher's; the final norm and the readout are the
trained draft's, with the temperature its calibration folded in divided back out, so training
starts from the logits the draft was trained to give. Measured on SmolLM2 (docs/drafts.md):
`draft_mid` = `draft`'s three layers + SmolLM2's layer 1 reaches a held-out agreement of 0.577
after 150 steps, against 0.524 after 300 steps from SmolLM2's layers alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from kvspec.models.calibrate import untie_output
from kvspec.models.draft_vocab import reduced_head


@dataclass(frozen=True)
class WarmStart:
    """A trained draft (`model`), the teacher layers it was cut from, and the temperature
    folded into its readout (1.0 when it was not calibrated)."""

    model: nn.Module
    layers: Sequence[int]
    temperature: float = 1.0

    def digest(self) -> str:
        """A hash of the trained draft's weights and of how it was cut (resume checks)."""
        h = hashlib.sha256(repr((list(self.layers), self.temperature)).encode())
        for name, tensor in sorted(self.model.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        return h.hexdigest()[:16]


def shared_positions(layers: Sequence[int], start_layers: Sequence[int]) -> dict[int, int]:
    """{position in the new draft: position in the trained one} of the teacher layers both
    keep; every layer of the trained draft must be among the new one's."""
    missing = sorted(set(start_layers) - set(layers))
    if missing:
        raise ValueError(f"the trained draft's teacher layers {missing} are not among the "
                         f"new draft's layers {list(layers)}: they would be dropped")  # fmt: skip
    where = {layer: i for i, layer in enumerate(start_layers)}
    return {i: where[layer] for i, layer in enumerate(layers) if layer in where}


@torch.no_grad()
def warm_start(student: nn.Module, layers: Sequence[int], start: WarmStart) -> dict[int, int]:
    """Load `start`'s weights into `student` (built from the teacher's `layers`, its readout
    already in place): the shared decoder layers, the final norm, the input embedding and the
    readout (× the folded temperature); the positions taken (new → trained)."""
    positions = shared_positions(layers, start.layers)
    src, dst = start.model.base_model, student.base_model
    for new, old in positions.items():
        dst.layers[new].load_state_dict(src.layers[old].state_dict())
    dst.norm.load_state_dict(src.norm.state_dict())
    _copy_readout(student, start)
    return positions


def _copy_readout(student: nn.Module, start: WarmStart) -> None:
    """The trained draft's embedding and output rows, its temperature unfolded; both drafts
    must read out over the same tokens."""
    mine, theirs = reduced_head(student), reduced_head(start.model)
    if (mine is None) != (theirs is None) or (
        mine is not None and not torch.equal(mine.ids.cpu(), theirs.ids.cpu())
    ):
        raise ValueError("the trained draft reads out over other tokens than this draft (set "
                         "the same `vocab` and data, so both count the same outputs)")  # fmt: skip
    src_out = start.model.get_output_embeddings()
    student.get_input_embeddings().load_state_dict(start.model.get_input_embeddings().state_dict())
    if src_out.weight is not start.model.get_input_embeddings().weight:
        untie_output(student)  # the trained draft's readout was untied (e.g. by calibration)
    out = student.get_output_embeddings()
    out.weight.copy_(src_out.weight * start.temperature)
    if getattr(out, "bias", None) is not None:
        out.bias.copy_(src_out.bias * start.temperature)
