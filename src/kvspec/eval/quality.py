"""Reference-based answer quality without a model: GSM8K's final-number match, ROUGE-L F
(Google's `rouge_score`, no stemming) and the code a chat answer holds (for the sandboxed
HumanEval runner)."""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
FENCE = re.compile(r"```[a-zA-Z0-9_+-]*\n?")


def gsm8k_answer(reference: str) -> str:
    """The final answer of a GSM8K reference solution: the text after its last `####`."""
    if "####" not in reference:
        raise ValueError(f"a GSM8K reference ends with '#### <answer>': {reference[-80:]!r}")
    return reference.rsplit("####", 1)[1].strip()


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").rstrip("."))
    except ValueError:
        return None


def gsm8k_correct(reference: str, response: str) -> bool:
    """Is the last number of `response` the reference's final answer (as numbers)?"""
    numbers = NUMBER.findall(response)
    want = _number(gsm8k_answer(reference))
    return bool(numbers) and want is not None and _number(numbers[-1]) == want


def rouge_l_f(reference: str, candidate: str) -> float:
    """ROUGE-L F1 of `candidate` against `reference` (lower-cased word tokens, no stemming)."""
    from rouge_score import rouge_scorer

    return float(
        rouge_scorer.RougeScorer(["rougeL"]).score(reference, candidate)["rougeL"].fmeasure
    )


def code_of(answer: str) -> str:
    """The content of an answer's first fenced code block (to its closing fence or the end of
    the answer), or the whole answer when it has no fence."""
    match = FENCE.search(answer)
    if match is None:
        return answer
    return answer[match.end() :].split("```", 1)[0]
