"""Speculative sampling's worked example: exact with our verifier, detectably wrong without."""

import pytest

from kvspec.lecture import spec_example as se


def test_quick_brown_acceptance_matches_min_1_q_over_p() -> None:
    rows = se.acceptance_rows(trials=4000, seed=0)
    quick, brown, residual = rows
    assert quick["alpha_theory"] == 1 and quick["alpha_measured"] == 1
    assert brown["alpha_theory"] == 0.5
    assert brown["alpha_measured"] == pytest.approx(0.5, abs=0.04)
    # residual max(0, q - p) over brown/blue/red = (0, 0.3, 0.1), normalised
    assert residual["distribution"] == pytest.approx({"blue": 0.75, "red": 0.25})


@pytest.mark.parametrize(("p", "q"), [(se.BINARY_P, se.BINARY_Q),
                                      (se.QUICK_BROWN_P, se.QUICK_BROWN_Q)])  # fmt: skip
def test_chi_square_accepts_the_verifier_and_rejects_wrong_ones(p, q) -> None:
    rows = se.exactness_rows(p, q, "x", trials=6000, seed=1)
    for row in rows:
        ours = row["verifier"].startswith("verify_sampling")
        if ours:
            assert row["p_value"] > 1e-3, row
    wrong = [r["p_value"] for r in rows if not r["verifier"].startswith("verify_sampling")]
    assert min(wrong) < 1e-6  # each wrong verifier fails somewhere
    for name in se.VERIFIERS:
        if not name.startswith("verify_sampling"):
            assert min(r["p_value"] for r in rows if r["verifier"] == name) < 1e-6, name


def test_expected_tokens_formula() -> None:
    assert se.expected_tokens(0.0, 4) == 1
    assert se.expected_tokens(1.0, 4) == 5
    assert se.expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_measured_rows_on_tiny_models() -> None:
    from tests.tiny import tiny_llama

    target, draft = tiny_llama(0), tiny_llama(1)
    rows = se.measured_rows(target, draft, [[1, 2, 3], [4, 5]], [1, 3], 6, 1.0, [], seed=0)
    assert [r["k"] for r in rows] == [1, 3]
    for r in rows:
        assert 0 < r["alpha"] < 1
        assert 1 <= r["measured_tokens_per_step"] <= r["k"] + 1
        assert r["tokens"] == 12
