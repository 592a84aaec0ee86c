"""Fixtures of the distillation and calibration tests: a tiny confident teacher, its
records and their training sequences (one of each per module)."""

from __future__ import annotations

import pytest

from kvspec.models.distil import distil_sequences

from .distil_data import confident_teacher, distil_records


@pytest.fixture(scope="module")
def teacher():
    return confident_teacher()


@pytest.fixture(scope="module")
def records(teacher) -> list[dict]:
    return distil_records(teacher)


@pytest.fixture(scope="module")
def seqs(records):
    return distil_sequences(records, max_len=40, prompt_loss=False)
