"""A draft started from another, trained draft: which weights come from where, the checks on
the two drafts, and the distillation stage's files (tiny seeded teacher)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kvspec.models.calibrate import fold_temperature
from kvspec.models.distil import build_student
from kvspec.models.draft_vocab import attach_reduced_head, reduced_head
from kvspec.models.warm_start import WarmStart, shared_positions, warm_start

from .distil_data import stage_teacher

ARCH = {"family": "llama", "hidden": 32, "intermediate": 64, "layers": 1, "heads": 4,
        "kv_heads": 2, "max_position": 64, "tie_embeddings": True}  # fmt: skip
IDS = list(range(0, 40, 2))


def trained(teacher: torch.nn.Module, layers: list[int], ids=IDS, tau=0.8) -> torch.nn.Module:
    """A draft cut from `teacher`'s `layers` whose weights moved (as training moves them),
    with a reduced readout over `ids` and temperature `tau` folded in."""
    draft = build_student({**ARCH, "layers": len(layers)}, teacher, 0, "target", layers)
    attach_reduced_head(draft, ids)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(0.01 * torch.randn_like(p))
    fold_temperature(draft, tau)
    return draft.eval()


def test_shared_layers_norm_and_unfolded_readout_come_from_the_trained_draft(teacher) -> None:
    start = trained(teacher, [1])
    head_before_fold = reduced_head(start).weight.detach() * 0.8
    student = build_student({**ARCH, "layers": 2}, teacher, 0, "target", [0, 1])
    attach_reduced_head(student, IDS)
    taken = warm_start(student, [0, 1], WarmStart(start, [1], 0.8))
    assert taken == {1: 0}
    mine, theirs, teach = student.model.layers, start.model.layers, teacher.model.layers
    assert torch.equal(mine[1].mlp.up_proj.weight, theirs[0].mlp.up_proj.weight)
    assert not torch.equal(mine[1].mlp.up_proj.weight, teach[1].mlp.up_proj.weight)
    assert torch.equal(mine[0].self_attn.q_proj.weight, teach[0].self_attn.q_proj.weight)
    assert torch.equal(student.model.norm.weight, start.model.norm.weight)
    assert torch.allclose(reduced_head(student).weight, head_before_fold, atol=1e-7)
    assert torch.equal(student.get_input_embeddings().weight, start.get_input_embeddings().weight)


def test_a_trained_draft_that_would_lose_weights_or_read_other_tokens_is_refused(teacher) -> None:
    student = build_student({**ARCH, "layers": 2}, teacher, 0, "target", [0, 1])
    attach_reduced_head(student, IDS)
    with pytest.raises(ValueError, match=r"layers \[2\] are not among"):
        shared_positions([0, 1], [1, 2])
    other = trained(teacher, [1], ids=list(range(20)))
    with pytest.raises(ValueError, match="reads out over other tokens"):
        warm_start(student, [0, 1], WarmStart(other, [1], 0.8))


def test_the_digest_follows_the_weights_and_the_cut(teacher) -> None:
    start = trained(teacher, [1])
    digest = WarmStart(start, [1], 0.8).digest()
    assert digest == WarmStart(start, [1], 0.8).digest()
    assert digest != WarmStart(start, [0], 0.8).digest()
    assert digest != WarmStart(start, [1], 1.0).digest()
    with torch.no_grad():
        start.model.norm.weight.add_(1e-3)
    assert digest != WarmStart(start, [1], 0.8).digest()


def test_distil_stage_starts_from_the_trained_draft(tmp_path: Path) -> None:
    """The rule's entry point: a draft of layer 1, calibrated, then a draft of layers 0-1
    started from it. At a vanishing learning rate the second keeps the first's layer and
    readout (temperature unfolded), and the teacher's layer 0."""
    from kvspec.models.load import load_model
    from kvspec.models.stages import distil_stage

    teacher, _, teacher_dir, responses = stage_teacher(tmp_path, ARCH)
    train = {"steps": 4, "batch_size": 2, "lr": 1e-2, "warmup_steps": 1, "top_k": 8,
             "eval_every": 2, "ckpt_every": 2, "weight_decay": 0.0}  # fmt: skip
    decl = {"teacher": "target", "arch": ARCH, "init": "target", "layers": [1], "vocab": 40,
            "calibrate": [0.5], "train": train,
            "data": {"val_fraction": 0.2, "max_len": 40, "prompt_loss": False,
                     "teacher_batch": 4, "teacher_dtype": "float32"}}  # fmt: skip
    out = tmp_path / "out"
    files = {n: str(out / n) for n in ("draft", "draft.csv", "draft.json", "mid", "mid.csv",
                                       "mid.json")}  # fmt: skip
    common = {"teacher": str(teacher_dir), "responses": str(responses), "seed": 0, "threads": 1}
    distil_stage(**common, decl=decl, out_model=files["draft"], out_curve=files["draft.csv"],
                 out_stats=files["draft.json"])  # fmt: skip
    tau = json.loads(Path(files["draft.json"]).read_text())["calibration"]["temperature"]
    mid = {**decl, "arch": {**ARCH, "layers": 2}, "layers": [0, 1], "start": "draft",
           "calibrate": None, "train": {**train, "lr": 1e-9}}  # fmt: skip
    distil_stage(**common, decl=mid, out_model=files["mid"], out_curve=files["mid.csv"],
                 out_stats=files["mid.json"], start=files["draft"], start_stats=files["draft.json"],
                 start_layers=[1])  # fmt: skip
    draft, _ = load_model(files["draft"])
    got, _ = load_model(files["mid"])
    stats = json.loads(Path(files["mid.json"]).read_text())
    assert stats["warm_start"] == {"layers_taken": {"1": 0}, "temperature_unfolded": tau}
    close = {"atol": 1e-6, "rtol": 0}
    assert torch.allclose(got.model.layers[1].mlp.down_proj.weight,
                          draft.model.layers[0].mlp.down_proj.weight, **close)  # fmt: skip
    assert torch.allclose(got.model.layers[0].mlp.down_proj.weight,
                          teacher.model.layers[0].mlp.down_proj.weight, **close)  # fmt: skip
    assert torch.allclose(reduced_head(got).weight, reduced_head(draft).weight * tau, **close)
    with pytest.raises(ValueError, match="needs the trained draft's stats file"):
        distil_stage(**common, decl=mid, out_model=files["mid"], out_curve=files["mid.csv"],
                     out_stats=files["mid.json"], start=files["draft"])  # fmt: skip
