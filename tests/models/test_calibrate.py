"""A draft's temperature: fit on training sequences against the teacher's top-k, folded into
its output layer (tiny seeded models)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from kvspec.models import distil
from kvspec.models.calibrate import (
    _overlaps,
    best_temperature,
    calibrate,
    fold_temperature,
    overlap_by_temperature,
)
from kvspec.models.distil import teacher_targets
from kvspec.models.draft_vocab import attach_reduced_head, readout_logits

from ..tiny import tiny_llama
from .distil_data import VOCAB
from .test_distil import DECL


def _logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_folding_divides_the_logits_and_unties_a_tied_head() -> None:
    model = tiny_llama(1, vocab=VOCAB, hidden=16, intermediate=32, double=False).eval()
    model.config.tie_word_embeddings = True
    model.tie_weights()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = [3, 1, 4, 1, 5]
    before, embedding = _logits(model, ids), model.model.embed_tokens.weight.clone()
    fold_temperature(model, 0.5)
    after = _logits(model, ids)
    torch.testing.assert_close(after, before / 0.5, rtol=1e-5, atol=1e-5)
    assert torch.equal(after.argmax(-1), before.argmax(-1))
    assert torch.equal(model.model.embed_tokens.weight, embedding)  # the input side is untouched
    assert model.lm_head.weight is not model.model.embed_tokens.weight
    assert model.config.tie_word_embeddings is False
    with pytest.raises(ValueError, match="positive"):
        fold_temperature(model, 0.0)


def test_folding_survives_save_and_load(tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    model = tiny_llama(2, vocab=VOCAB, hidden=16, intermediate=32, double=False).eval()
    model.config.tie_word_embeddings = True
    model.tie_weights()
    fold_temperature(model, 0.7)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(_logits(loaded, [2, 7, 1]), _logits(model, [2, 7, 1]))


def test_a_known_temperature_is_recovered(teacher, seqs) -> None:
    """A draft equal to the teacher at temperature 0.5 (its logits doubled) is calibrated back:
    τ = 2 over a grid that holds it, where the overlap (full vocabulary) is 1."""
    targets, _ = teacher_targets(teacher, seqs, top_k=VOCAB, tau=1.0, batch_size=4)
    draft = copy.deepcopy(teacher)
    fold_temperature(draft, 0.5)
    alphas = overlap_by_temperature(draft, seqs, targets, [0.5, 1.0, 2.0, 4.0])
    assert best_temperature(alphas) == 2.0
    assert alphas[2.0] == pytest.approx(1.0, abs=1e-4)
    assert alphas[1.0] < alphas[2.0] and alphas[4.0] < alphas[2.0]
    record = calibrate(draft, seqs, targets, [0.5, 1.0, 2.0, 4.0])
    assert record["temperature"] == 2.0 and record["sequences"] == len(seqs)
    ids = list(seqs[0].ids)
    torch.testing.assert_close(_logits(draft, ids), _logits(teacher, ids), rtol=1e-4, atol=1e-4)


def test_a_reduced_head_is_calibrated_over_its_tokens(teacher, seqs) -> None:
    targets, _ = teacher_targets(teacher, seqs, top_k=8, tau=1.0, batch_size=4)
    draft = copy.deepcopy(teacher)
    head = attach_reduced_head(draft, list(range(0, VOCAB, 2)))
    rows = head.weight.detach().clone()
    alphas = overlap_by_temperature(draft, seqs, targets, [0.5, 1.0])
    assert all(0 < a <= 1 for a in alphas.values())
    fold_temperature(draft, 0.5)
    torch.testing.assert_close(head.weight.detach(), rows / 0.5)


def test_the_overlap_matches_the_full_log_softmax_reference(teacher, seqs) -> None:
    """The fit's per-τ overlap (log-probs formed only at the teacher's top-k) equals
    `kd_targets.overlap` of the full log_softmax(z / τ), token-weighted, on a reduced head."""
    import torch.nn.functional as F

    from kvspec.models.kd_targets import batch_targets, overlap, restrict_targets
    from kvspec.models.packing import make_batch

    targets, _ = teacher_targets(teacher, seqs, top_k=6, tau=1.0, batch_size=4)
    draft = copy.deepcopy(teacher)
    torch.manual_seed(3)
    with torch.no_grad():  # a draft unlike its teacher
        draft.lm_head.weight.add_(torch.randn_like(draft.lm_head.weight))
    head = attach_reduced_head(draft, list(range(1, VOCAB, 3)))
    grid = [0.5, 0.8, 1.0, 1.7]
    alphas = overlap_by_temperature(draft, seqs, targets, grid, batch_size=3)
    batch = make_batch(seqs, 0)
    with torch.no_grad():
        hidden = batch.learned(batch.hidden(draft))
        logits = readout_logits(draft, hidden).float()
    every = torch.ones(len(logits), dtype=torch.bool)
    tgt = restrict_targets(batch_targets(targets, seqs, "cpu"), every, head.to_draft())
    blocks = _overlaps(logits, tgt, grid, rows=5)  # several cache blocks
    for tau in grid:
        want = float(overlap(F.log_softmax(logits / tau, dim=-1), tgt).mean())
        assert alphas[tau] == pytest.approx(want, rel=1e-5)
        assert blocks[tau] / len(logits) == pytest.approx(want, rel=1e-5)
    assert len(logits) > 10
    assert len(set(np.round(list(alphas.values()), 6))) == len(grid)  # τ changes the overlap


def test_the_fit_runs_the_forward_in_the_training_dtype(teacher, seqs) -> None:
    """Under bfloat16 the overlaps are computed anew (not equal to float32's) and stay within
    its round-off of them; the draft's weights stay float32."""
    targets, _ = teacher_targets(teacher, seqs, top_k=6, tau=1.0, batch_size=4)
    draft = copy.deepcopy(teacher)
    grid = [0.5, 1.0, 2.0]
    exact = overlap_by_temperature(draft, seqs, targets, grid)
    half = overlap_by_temperature(draft, seqs, targets, grid, dtype="bfloat16")
    assert half != exact
    for tau in grid:
        assert half[tau] == pytest.approx(exact[tau], abs=0.02)
    assert next(draft.parameters()).dtype == torch.float32


def test_ties_keep_the_temperature_closest_to_one() -> None:
    assert best_temperature({0.8: 0.5, 1.0: 0.5, 1.3: 0.5}) == 1.0
    assert best_temperature({0.7: 0.51, 1.0: 0.5}) == 0.7
    with pytest.raises(ValueError, match="no sequences"):
        overlap_by_temperature(tiny_llama(0, vocab=VOCAB), [], {}, [1.0])


def test_distil_model_calibrates_keeping_the_argmax(teacher, records) -> None:
    """Through the stage's entry point: the draft's temperature is fit on its training
    responses and folded in; greedy agreement is unchanged, the record keeps both sides."""
    grid = [0.25, 0.5, 1.0, 2.0]
    decl = {**DECL, "calibrate": grid, "train": {**DECL["train"], "steps": 8}}
    _, _, plain = distil.distil_model(teacher, records, DECL | {"train": decl["train"]}, seed=0)
    student, curve, stats = distil.distil_model(teacher, records, decl, seed=0)
    cal = stats["calibration"]
    assert plain["calibration"] is None
    assert cal["temperature"] in grid and cal["sequences"] == stats["sequences"]["train"]
    assert cal["uncalibrated"] == {k: v for k, v in plain["final"].items() if k.startswith("val_")}
    assert stats["final"]["val_match"] == plain["final"]["val_match"]
    assert cal["fit_alpha"][str(cal["temperature"])] == max(cal["fit_alpha"].values())
    if cal["temperature"] != 1.0:
        assert stats["final"]["val_alpha"] != plain["final"]["val_alpha"]
    assert np.isfinite(stats["final"]["val_alpha"])


def test_calibration_refuses_a_run_without_teacher_targets(teacher, records) -> None:
    decl = {**DECL, "calibrate": [1.0], "train": {**DECL["train"], "beta": 0.0, "steps": 2}}
    with pytest.raises(ValueError, match="teacher's targets"):
        distil.distil_model(teacher, records, decl, seed=0)
