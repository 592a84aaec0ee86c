"""Pretraining loop: schedule, learning, and resume = uninterrupted run (seeded)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvspec.models.build import build_model
from kvspec.models.corpus import sample_documents, split_stream
from kvspec.models.pretrain import TrainSpec, lr_at, train
from kvspec.models.tokenizer import train_tokenizer

ARCH = {
    "family": "llama",
    "hidden": 32,
    "intermediate": 64,
    "layers": 1,
    "heads": 4,
    "kv_heads": 2,
    "max_position": 64,
}


def spec(**kw) -> TrainSpec:
    base = dict(
        steps=12,
        batch_size=4,
        seq_len=16,
        lr=3e-3,
        min_lr_ratio=0.1,
        warmup_steps=3,
        weight_decay=0.1,
        grad_clip=1.0,
        eval_every=4,
        eval_batches=2,
        ckpt_every=4,
        seed=0,
    )
    return TrainSpec(**{**base, **kw})


@pytest.fixture(scope="module")
def setup():
    tok = train_tokenizer(["abc abd abe abf " * 10], 280, 64)
    rng = np.random.default_rng(0)
    pattern = np.tile(np.arange(10, 30, dtype=np.uint16), 200)  # learnable periodic stream
    noise = rng.integers(10, 30, size=pattern.size).astype(np.uint16)
    stream = np.where(rng.random(pattern.size) < 0.1, noise, pattern)
    return tok, stream


def test_lr_schedule_warmup_then_cosine() -> None:
    s = spec(steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert lr_at(0, s) == pytest.approx(0.1) and lr_at(9, s) == pytest.approx(1.0)
    assert lr_at(10, s) == pytest.approx(1.0)
    assert lr_at(99, s) == pytest.approx(0.1, abs=1e-3)
    lrs = [lr_at(i, s) for i in range(10, 100)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))


def test_training_lowers_validation_loss(setup) -> None:
    tok, stream = setup
    model = build_model(ARCH, tok, seed=0)
    curve = train(model, stream, stream, spec(steps=40, eval_every=10))
    assert curve[-1]["val_loss"] < curve[0]["val_loss"] - 0.5
    assert curve[-1]["tokens"] == 40 * 4 * 16


def test_resume_continues_the_same_curve(setup, tmp_path) -> None:
    tok, stream = setup
    full = train(build_model(ARCH, tok, seed=0), stream, stream, spec())
    ckpt = tmp_path / "ckpt.pt"
    # First run "crashes" after step 8 (a checkpoint exists at step 8) ...
    train(build_model(ARCH, tok, seed=0), stream, stream, spec(steps=12), ckpt, "a")
    state = torch.load(ckpt, weights_only=False)
    assert state["step"] == 8
    # ... the rerun starts from a fresh model and must land on the same curve.
    resumed = train(build_model(ARCH, tok, seed=5), stream, stream, spec(), ckpt, "a")
    assert [r["step"] for r in resumed] == [r["step"] for r in full]
    np.testing.assert_allclose(
        [r["val_loss"] for r in resumed], [r["val_loss"] for r in full], rtol=1e-5
    )


def test_checkpoint_of_another_config_is_ignored(setup, tmp_path) -> None:
    tok, stream = setup
    ckpt = tmp_path / "ckpt.pt"
    train(build_model(ARCH, tok, seed=0), stream, stream, spec(), ckpt, "a")
    curve = train(build_model(ARCH, tok, seed=0), stream, stream, spec(), ckpt, "b")
    assert curve[0]["step"] == 4  # started from scratch, not from step 8


def test_split_and_sampling_are_seeded() -> None:
    tokens = np.arange(10_000, dtype=np.uint16)
    tr, va = split_stream(tokens, 0.1, seed=3)
    assert len(tr) + len(va) == len(tokens) and not set(tr[:50]) & set(va)
    tr2, _ = split_stream(tokens, 0.1, seed=3)
    assert np.array_equal(tr, tr2)
    docs = [str(i) * 10 for i in range(50)]
    picked = sample_documents(docs, 100, seed=0)
    assert sum(map(len, picked)) <= 100 and picked == sample_documents(docs, 100, seed=0)
