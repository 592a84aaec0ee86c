"""Token budgets of a healing run → the optimizer steps at which their checkpoints are saved.

Each budget is rounded to the nearest whole step; two budgets that round to the same step would
share one checkpoint, so they are refused here (at config validation and in `HealSpec`)."""

from __future__ import annotations

from collections.abc import Sequence


def budget_steps(budgets: Sequence[int], tokens_per_step: int) -> dict[int, int]:
    """{optimizer step: budget}; ValueError for empty, non-increasing, sub-step or colliding
    budgets."""
    if not budgets or any(b <= 0 for b in budgets):
        raise ValueError(f"budgets must be positive token counts, got {list(budgets)}")
    if any(b >= c for b, c in zip(budgets, budgets[1:], strict=False)):
        raise ValueError(f"budgets must be strictly increasing, got {list(budgets)}")
    steps: dict[int, int] = {}
    for budget in budgets:
        if budget < tokens_per_step:
            raise ValueError(
                f"budget {budget} tokens is less than one optimizer step ({tokens_per_step} tokens)"
            )
        step = round(budget / tokens_per_step)
        if step in steps:
            raise ValueError(
                f"budgets {steps[step]} and {budget} both round to optimizer step {step} "
                f"({tokens_per_step} tokens per step); their checkpoints would be the same"
            )
        steps[step] = budget
    return steps


def tokens_per_step(train: dict) -> int:
    """seq_len × micro_batch × accum × processes of a `care.heal.train` block (defaults filled)."""
    return train["seq_len"] * train["micro_batch"] * train["accum"] * train["processes"]
