"""MATH-500 grading with math-verify."""

import pytest

from kvspec.eval.math500 import accuracy, is_correct


def test_equivalent_answers_are_correct() -> None:
    assert is_correct("\\frac{1}{2}", "so the answer is $\\boxed{0.5}$")
    assert is_correct("\\left( 3, \\frac{\\pi}{2} \\right)", "$\\boxed{(3, \\frac{\\pi}{2})}$")
    assert not is_correct("3", "the answer is $\\boxed{4}$")
    assert not is_correct("3", "no answer at all")


def test_accuracy() -> None:
    assert accuracy(["1", "2"], ["$\\boxed{1}$", "$\\boxed{3}$"]) == 0.5
    with pytest.raises(ValueError):
        accuracy(["1"], [])
