"""Healing (kvspec.care.heal): the loss, one step, checkpoints per budget, crash and resume."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM

from kvspec.care.heal import HealSpec, heal, heal_loss, kd_loss, lr_at, make_optimizer

from ..tiny import tiny_llama

VOCAB = 50


def _model(seed: int) -> LlamaForCausalLM:
    return tiny_llama(seed, vocab=VOCAB, intermediate=48, layers=1, double=False).train()


def _tokens(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (np.arange(n) * 7 + rng.integers(0, 3, n)) % VOCAB  # learnable, not trivial


def _spec(**kw) -> HealSpec:
    base = dict(
        budgets=[64, 192],
        seq_len=16,
        micro_batch=2,
        accum=2,
        lr=3e-3,
        warmup_steps=1,
        eval_every=1,
        eval_windows=4,
        ckpt_every=1,
        seed=3,
    )
    return HealSpec(**{**base, **kw})


def test_kd_loss_is_zero_when_student_equals_teacher() -> None:
    logits = torch.randn(2, 5, VOCAB)
    assert kd_loss(logits, logits.clone(), tau=4.0).item() == pytest.approx(0.0, abs=1e-7)
    assert kd_loss(logits, torch.randn(2, 5, VOCAB), tau=4.0).item() > 1e-3


def test_kd_loss_is_forward_kl_teacher_to_student() -> None:
    """KL(T ‖ S) = Σ p_T (log p_T − log p_S), checked on numbers where the reverse KL differs."""
    teacher = torch.tensor([[[3.0, 0.0, 0.0]]])
    student = torch.tensor([[[0.0, 2.0, 0.0]]])
    p_t, p_s = torch.softmax(teacher, -1), torch.softmax(student, -1)
    forward = (p_t * (p_t.log() - p_s.log())).sum().item()
    reverse = (p_s * (p_s.log() - p_t.log())).sum().item()
    assert abs(forward - reverse) > 0.3  # the test can tell the two directions apart
    assert kd_loss(student, teacher, tau=1.0).item() == pytest.approx(forward, rel=1e-6)
    # tau divides both logit sets before the softmax
    assert kd_loss(2 * student, 2 * teacher, tau=2.0).item() == pytest.approx(forward, rel=1e-6)


def test_total_loss_is_ce_plus_weighted_kd() -> None:
    student, teacher = _model(0), _model(1)
    batch = torch.from_numpy(_tokens(32, 0).reshape(2, 16))
    loss, ce, kd = heal_loss(student, teacher, batch, _spec(tau=2.0, beta=0.5))
    assert loss.item() == pytest.approx(ce + 0.5 * 4.0 * kd, rel=1e-5)
    _, ce_same, kd_same = heal_loss(student, copy.deepcopy(student), batch, _spec())
    assert kd_same == pytest.approx(0.0, abs=1e-7) and ce_same == pytest.approx(ce, rel=1e-6)


def test_one_healing_step_lowers_the_loss_on_a_fixed_batch() -> None:
    student, teacher = _model(0), _model(1)
    spec = _spec()
    batch = torch.from_numpy(_tokens(32, 0).reshape(2, 16))
    opt = make_optimizer(student, spec)
    before, _, _ = heal_loss(student, teacher, batch, spec)
    before.backward()
    opt.step()
    after, _, _ = heal_loss(student, teacher, batch, spec)
    assert after.item() < before.item()


def test_schedule_warms_up_then_decays_to_the_floor() -> None:
    spec = _spec(budgets=[64 * 10], warmup_steps=2, min_lr_ratio=0.1)
    lrs = [lr_at(s, spec) for s in range(spec.total_steps)]
    assert lrs[0] < lrs[1] == pytest.approx(spec.lr)
    assert lrs[-1] == pytest.approx(0.1 * spec.lr, rel=0.05)
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:], strict=False))


def _run(tmp_path, stop_after=None, state=None):
    student, teacher = _model(0), _model(1)
    saved = {}

    def save_budget(budget, model):
        saved[budget] = {k: v.clone() for k, v in model.state_dict().items()}

    curve = heal(
        student,
        teacher,
        _tokens(4000, 1),
        _tokens(400, 2),
        _spec(),
        save_budget,
        state,
        "fp",
        stop_after=stop_after,
    )
    return curve, saved


def test_checkpoints_at_each_budget_and_curve_starts_before_healing(tmp_path) -> None:
    curve, saved = _run(tmp_path)
    spec = _spec()
    assert spec.tokens_per_step == 64 and spec.total_steps == 3
    assert sorted(saved) == [64, 192]
    assert [r["step"] for r in curve] == [0, 1, 2, 3]
    assert [r["tokens"] for r in curve] == [0, 64, 128, 192]
    assert curve[-1]["val_ppl"] < curve[0]["val_ppl"]  # healing helps on held-out text
    teacher = {r["teacher_val_ppl"] for r in curve}  # the reference line of the figure
    assert len(teacher) == 1 and teacher.pop() > 1.0


def test_resume_after_a_crash_continues_the_same_curve(tmp_path) -> None:
    full, saved_full = _run(tmp_path)
    state = tmp_path / "state.pt"
    _run(tmp_path, stop_after=2, state=state)  # "crash" after step 2
    assert state.exists()
    resumed, saved = _run(tmp_path, state=state)
    cols = ["step", "tokens", "train_ce", "train_kd", "val_ppl"]
    for a, b in zip(full, resumed, strict=True):
        for col in cols:
            assert a[col] == pytest.approx(b[col], rel=1e-6, nan_ok=True), col
    assert sorted(saved) == [192]  # budget 64 was saved before the crash
    for k, v in saved_full[192].items():
        assert torch.allclose(v, saved[192][k], atol=1e-6), k


def test_state_from_another_configuration_is_ignored(tmp_path) -> None:
    state = tmp_path / "state.pt"
    _run(tmp_path, stop_after=1, state=state)
    student, teacher = _model(0), _model(1)
    curve = heal(
        student,
        teacher,
        _tokens(4000, 1),
        _tokens(400, 2),
        _spec(lr=1e-3),
        lambda b, m: None,
        state,
        "fp",
    )
    assert [r["step"] for r in curve] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"budgets": [192, 64]}, "increasing"),
        ({"budgets": [32]}, "less than one optimizer step"),
        ({"budgets": [128, 150]}, "128 and 150 both round to optimizer step 2"),
        ({"mixed_precision": "fp16"}, "mixed_precision"),
        ({"accum": 0}, ">= 1"),
    ],
)
def test_bad_settings_are_refused(kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        _spec(**kw)


@pytest.mark.parametrize(
    ("value", "native", "expected"),
    [("auto", True, "bf16"), ("auto", False, "no"), ("no", True, "no"), ("bf16", False, "bf16")],
)
def test_auto_mixed_precision_is_bf16_only_where_bfloat16_is_native(
    monkeypatch, value, native, expected
) -> None:
    import kvspec.care.engines as engines
    import kvspec.models.load as load
    from kvspec.care.heal_stages import _heal_spec

    monkeypatch.setattr(load, "native_bfloat16", lambda device: native)
    assert engines.resolve_mixed_precision(value) == expected
    spec = _heal_spec({"budgets": [64], "seq_len": 8, "micro_batch": 2, "accum": 2,
                       "mixed_precision": value}, seed=0)  # fmt: skip
    assert spec.mixed_precision == expected


def check_teacher_validated_in_students_precision() -> None:
    """Run in a fresh interpreter: accelerate keeps one process-wide state, whose mixed
    precision cannot change once another test has set it."""
    from kvspec.care.heal import val_perplexity, val_windows

    teacher = _model(1)
    spec = _spec(budgets=[64], mixed_precision="bf16")
    curve = heal(_model(0), teacher, _tokens(4000, 1), _tokens(400, 2), spec, lambda b, m: None)
    val = val_windows(_tokens(400, 2), spec)
    float32 = val_perplexity(teacher, val, spec.micro_batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = val_perplexity(teacher, val, spec.micro_batch)
    assert bf16 != pytest.approx(float32, rel=1e-6)  # the two precisions can be told apart
    assert curve[0]["teacher_val_ppl"] == pytest.approx(bf16, rel=1e-9)
    # and the student's own validation ran in that autocast too (start of the curve)
    start = val_perplexity(_model(0), val, spec.micro_batch)
    assert curve[0]["val_ppl"] != pytest.approx(start, rel=1e-6)


def test_under_bf16_the_teacher_is_validated_in_the_students_precision() -> None:
    code = "import tests.care.test_heal as t; t.check_teacher_validated_in_students_precision()"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
