"""The plan and Snakemake agree: every job output the plan names (report items, targets) is a
job `snakemake -n` plans, and every rule's job count is what the plan implies."""

from __future__ import annotations

import pytest

from .conftest import SCALES, outputs_of


@pytest.mark.parametrize("scale", SCALES)
def test_plan_targets_are_planned_jobs(plans, dags, scale: str) -> None:
    produced = outputs_of(dags[scale])
    missing = [t for t in plans[scale].targets() if t not in produced]
    assert not missing, missing[:5]
    for item in plans[scale].report_items():
        assert dags[scale][item.rule] == {item.output_files()[0]: tuple(item.output_files())}
