"""Streams split from one run seed: stable, distinct per path, and uncorrelated."""

import numpy as np
import pytest

from kvspec.seeds import derive, numpy_generator, python_random


def test_a_path_always_names_the_same_stream() -> None:
    assert derive(3, "draft", 0, 1) == derive(3, "draft", 0, 1)
    assert python_random(3, "x").random() == python_random(3, "x").random()


def test_every_path_of_a_run_names_its_own_stream() -> None:
    paths = [("draft",), ("verify",), ("three_model",), ("sample",), ("1",), (1,), (0, 1), (1, 0)]
    paths += [("humaneval", p, c) for p in range(20) for c in range(20)]
    seeds = {derive(0, *path) for path in paths}
    assert len(seeds) == len(paths)
    assert derive(0, "draft") != derive(1, "draft")
    assert all(0 <= s < 2**63 for s in seeds)


def test_neighbouring_streams_are_uncorrelated() -> None:
    """Sample c's draft stream against sample c + 1's verifier stream (once the same seed)."""
    a = np.stack([numpy_generator(5, "draft", c).random(64) for c in range(400)])
    b = np.stack([numpy_generator(5, "verify", c + 1).random(64) for c in range(400)])
    r = np.corrcoef(a.ravel(), b.ravel())[0, 1]
    assert abs(r) < 4 / np.sqrt(a.size)  # four standard errors of a zero correlation


@pytest.mark.parametrize("bad", [-1, 1.5, True, None])
def test_path_parts_are_names_or_non_negative_indices(bad) -> None:
    with pytest.raises((TypeError, ValueError)):
        derive(0, bad)


def test_narrow_seeds_for_legacy_apis() -> None:
    assert all(derive(s, "lm-eval", bits=32) < 2**32 for s in range(50))
    np.random.seed(derive(0, "numpy", bits=32))  # the legacy API refuses 64-bit seeds
    with pytest.raises(ValueError):
        derive(0, bits=64)
