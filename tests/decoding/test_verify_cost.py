"""Verification cost: one median per q, every q timed in each round, bad input refused."""

from __future__ import annotations

import pytest

from kvspec.decoding.verify_cost import verify_costs
from tests.tiny import tree_llama


def test_one_positive_median_per_q() -> None:
    costs = verify_costs(tree_llama(0), [3, 17, 5, 9], (1, 4, 2), repeats=3)
    assert list(costs) == [1, 4, 2] and all(t > 0 for t in costs.values())


@pytest.mark.parametrize("qs, repeats", [((), 3), ((0, 2), 3), ((1,), 0)])
def test_bad_input_is_refused(qs, repeats) -> None:
    with pytest.raises(ValueError, match="qs must be positive"):
        verify_costs(tree_llama(0), [3, 17], qs, repeats)
