"""Reference-based answer quality without a model: GSM8K's final-number match, ROUGE-L F
(the LCS F-measure of Lin 2004 on lower-cased word tokens, as `rouge_score` without
stemming) and the code a chat answer holds (for the sandboxed HumanEval runner)."""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
WORD = re.compile(r"[a-z0-9]+")
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


def _lcs(a: list[str], b: list[str]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        diag = 0
        for j, y in enumerate(b, start=1):
            diag, row[j] = row[j], diag + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def rouge_l_f(reference: str, candidate: str) -> float:
    """ROUGE-L F1: 2·P·R / (P + R) with P = LCS / |candidate|, R = LCS / |reference|."""
    ref, cand = WORD.findall(reference.lower()), WORD.findall(candidate.lower())
    lcs = _lcs(ref, cand) if ref and cand else 0
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(cand), lcs / len(ref)
    return 2 * precision * recall / (precision + recall)


def code_of(answer: str) -> str:
    """The content of an answer's first fenced code block (to its closing fence or the end of
    the answer), or the whole answer when it has no fence."""
    match = FENCE.search(answer)
    if match is None:
        return answer
    return answer[match.end() :].split("```", 1)[0]
