"""HumanEval checking: canonical solutions pass, wrong or cheating completions fail, and
pass@k matches brute-force enumeration."""

from __future__ import annotations

import itertools
import math
import time
from fractions import Fraction
from typing import Any

import pytest

from kvspec.eval.humaneval import (
    check_completion,
    load_problems,
    pass_at_k,
    score,
)
from kvspec.eval.sandbox import run_program


@pytest.fixture(scope="module")
def problems() -> dict[str, dict[str, Any]]:
    return load_problems()


def test_load_problems(problems: dict[str, dict[str, Any]]) -> None:
    assert len(problems) == 164
    first = problems["HumanEval/0"]
    assert {"prompt", "canonical_solution", "test", "entry_point"} <= set(first)


def test_all_canonical_solutions_pass(problems: dict[str, dict[str, Any]]) -> None:
    start = time.monotonic()
    samples = {tid: [p["canonical_solution"]] for tid, p in problems.items()}
    result = score(samples, ks=(1,), problems=problems, workers=2)
    failures = {t: s["results"] for t, s in result["per_task"].items() if s["c"] != 1}
    assert not failures
    assert result["pass@k"] == {"pass@1": 1.0} and result["n_tasks"] == 164
    assert time.monotonic() - start < 60


WRONG = [
    ("HumanEval/0", "    return False\n", "AssertionError"),
    ("HumanEval/2", "    return number\n", "AssertionError"),
    ("HumanEval/0", "    return undefined_name\n", "NameError"),
    ("HumanEval/0", "    import os\n    os._exit(0)\n", "ended before answering"),
    ("HumanEval/0", "    pass\nimport os\nos._exit(0)\n", "ended before answering"),
    ("HumanEval/0", "    import sys\n    sys.exit(0)\n", "raised SystemExit"),
    ("HumanEval/0", "    return False\n\n\ndef check(candidate):\n    pass\n", "AssertionError"),
    (
        "HumanEval/4",
        "    return 0.0\nimport builtins\nbuiltins.abs = lambda x: 0.0\n",
        "AssertionError",
    ),
]


@pytest.mark.parametrize(("task_id", "completion", "reason"), WRONG)
def test_wrong_or_cheating_completions_fail(
    problems: dict[str, dict[str, Any]], task_id: str, completion: str, reason: str
) -> None:
    result = check_completion(problems[task_id], completion)
    assert result.status == "failed", result
    assert reason in result.reason, result.reason


def test_builtins_patch_would_fool_a_naive_harness(problems: dict[str, dict[str, Any]]) -> None:
    """The abs() patch above is a real cheat: prompt + completion + test in one namespace
    (the reference harness layout) passes it; ours does not."""
    problem, cheat = problems["HumanEval/4"], WRONG[-1][1]
    naive = f"{problem['prompt']}{cheat}\n{problem['test']}\ncheck({problem['entry_point']})\n"
    assert run_program(naive).status == "passed"
    assert check_completion(problem, cheat).status == "failed"


def test_non_terminating_completion_times_out(problems: dict[str, dict[str, Any]]) -> None:
    result = check_completion(problems["HumanEval/0"], "    while True:\n        pass\n", 1.0)
    assert result.status == "timeout"


def test_prompt_helpers_are_visible_to_tests(problems: dict[str, dict[str, Any]]) -> None:
    """HumanEval/38's test calls encode_cyclic, defined in the prompt, not the completion:
    the tests reach it through its proxy (a NameError would mean they could not)."""
    result = check_completion(problems["HumanEval/38"], "    return s\n")
    assert result.status == "failed" and result.reason == "AssertionError"


def test_score_counts_per_task_and_means(problems: dict[str, dict[str, Any]]) -> None:
    good0, good2 = (problems[t]["canonical_solution"] for t in ("HumanEval/0", "HumanEval/2"))
    samples = {
        "HumanEval/0": [good0, "    return False\n", "    return True\n"],
        "HumanEval/2": [good2, "    return 0.0\n", good2],
    }
    result = score(samples, ks=(1, 2, 5), problems=problems, workers=1)
    per = result["per_task"]
    assert (per["HumanEval/0"]["c"], per["HumanEval/2"]["c"]) == (1, 2)
    assert per["HumanEval/0"]["pass@1"] == pytest.approx(1 / 3)
    assert per["HumanEval/2"]["pass@2"] == pytest.approx(1.0)
    assert "pass@5" not in per["HumanEval/0"]  # k > n is undefined
    assert result["pass@k"] == pytest.approx({"pass@1": 0.5, "pass@2": (2 / 3 + 1) / 2})
    assert [r["status"] for r in per["HumanEval/0"]["results"]] == ["passed", "failed", "failed"]


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_matches_enumeration(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(200, 3, 100), (1000, 1, 1), (1000, 500, 10)])
def test_pass_at_k_is_stable_for_large_n(n: int, c: int, k: int) -> None:
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1)])
def test_pass_at_k_rejects_invalid_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
