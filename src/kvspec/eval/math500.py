"""MATH-500 accuracy: a response is correct when math-verify finds its answer equal to the
reference (parsed as LaTeX; the last boxed or final expression of the response)."""

from __future__ import annotations

from collections.abc import Sequence


def is_correct(reference: str, response: str) -> bool:
    from math_verify import parse, verify

    gold = parse(f"${reference}$")
    return bool(gold) and bool(verify(gold, parse(response)))


def accuracy(references: Sequence[str], responses: Sequence[str]) -> float:
    if len(references) != len(responses) or not references:
        raise ValueError("need as many responses as references, at least one")
    return sum(map(is_correct, references, responses)) / len(references)
