"""Table 8's scoring of decoded answers: HumanEval through the sandbox (a right and a wrong
answer), GSM8K and ROUGE-L against the record's reference, a clear error without one."""

from __future__ import annotations

import pytest

from kvspec.eval.humaneval import load_problems
from kvspec.neural.quality import score_answer


def test_humaneval_answers_are_judged_by_the_problems_tests() -> None:
    problem = load_problems()["HumanEval/0"]
    right = f"Here:\n```python\n{problem['prompt']}{problem['canonical_solution']}```\nDone."
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
    assert score_answer("humaneval", problem, right, 10.0) == 1.0
    assert score_answer("humaneval", problem, wrong, 10.0) == 0.0
    assert score_answer("humaneval", problem, "```python\ndef has_close", 10.0) == 0.0  # cut


def test_reference_metrics_need_a_reference() -> None:
    record = {"id": "401", "reference": "600+400=1000\n#### 1000"}
    assert score_answer("gsm8k", record, "So the total is 1000.", 1.0) == 1.0
    assert score_answer("gsm8k", record, "So the total is 600.", 1.0) == 0.0
    summary = {"id": "241", "reference": "the cat sat"}
    assert score_answer("cnndm", summary, "the cat sat", 1.0) == 1.0
    with pytest.raises(ValueError, match="no reference"):
        score_answer("cnndm", {"id": "7", "reference": None}, "text", 1.0)
