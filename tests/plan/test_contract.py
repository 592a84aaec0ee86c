"""The plan and Snakemake agree: every job the plan names is exactly a job `snakemake -n`
plans, rule by rule (the one test here that runs Snakemake; a few seconds per scale)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..conftest import REPO, planned_jobs, shared_mirror, snakemake
from .conftest import SCALES

pytestmark = pytest.mark.skipif(shared_mirror() is None, reason="offline data mirror not present")


def dry_run_outputs(text: str) -> dict[str, set[frozenset[str]]]:
    """rule -> {the outputs of each job} from a dry run's job listing."""
    jobs: dict[str, set[frozenset[str]]] = {}
    for rule, body in re.findall(r"^(?:local)?rule (\w+):\n((?:    .*\n)+)", text, re.M):
        out = re.search(r"^    output: (.*)$", body, re.M)
        jobs.setdefault(rule, set()).add(frozenset(out[1].split(", ") if out else ()))
    return jobs


@pytest.mark.parametrize("scale", SCALES)
def test_plan_jobs_equal_snakemake_dry_run(tmp_path: Path, plans, scale: str) -> None:
    proc = snakemake(tmp_path, "-n", "--configfile", str(REPO / "config" / f"{scale}.yaml"))
    text = proc.stdout + proc.stderr
    plan_jobs = plans[scale].jobs()
    assert planned_jobs(proc) == {rule: len(jobs) for rule, jobs in plan_jobs.items()}
    listed = dry_run_outputs(text)
    for rule, jobs in plan_jobs.items():
        assert {frozenset(outs) for outs in jobs.values()} == listed[rule], rule
