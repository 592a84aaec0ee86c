"""GSM8K answer matching, ROUGE-L F and code extraction against hand-computed cases."""

from __future__ import annotations

import pytest

from kvspec.eval.quality import code_of, gsm8k_answer, gsm8k_correct, rouge_l_f

REF = "He pays 400*.5=$<<400*.5=200>>200 more\nSo it cost 600+400=$1000 in total.\n#### 1,000"


def test_gsm8k_takes_the_last_number_of_the_response() -> None:
    assert gsm8k_answer(REF) == "1,000"
    assert gsm8k_correct(REF, "Tickets cost 600, so the total is $1000.")
    assert gsm8k_correct(REF, "The answer is 1,000.")
    assert not gsm8k_correct(REF, "The total is 1000 dollars for 3 countries.")
    assert not gsm8k_correct(REF, "No number here.")
    with pytest.raises(ValueError, match="####"):
        gsm8k_answer("no final answer")


def test_rouge_l_is_the_lcs_f_measure() -> None:
    # LCS("the cat sat on the mat", "the cat lay on a mat") = the cat on mat = 4
    got = rouge_l_f("The cat sat on the mat.", "the cat lay on a mat")
    assert got == pytest.approx(2 * (4 / 6) * (4 / 6) / (4 / 6 + 4 / 6))
    assert rouge_l_f("a b c", "a b c") == 1.0
    assert rouge_l_f("a b c", "d e") == 0.0 and rouge_l_f("", "a") == 0.0
    # order matters: the reverse shares one-word subsequences only
    assert rouge_l_f("a b c d", "d c b a") == pytest.approx(0.25)


def test_code_of_takes_the_first_fenced_block() -> None:
    answer = "Here:\n```python\ndef f(x):\n    return x\n```\nand ```\nmore\n```"
    assert code_of(answer) == "def f(x):\n    return x\n"
    assert code_of("```python\ndef g():\n    pass") == "def g():\n    pass"  # cut at the end
    assert code_of("def h(): pass") == "def h(): pass"
