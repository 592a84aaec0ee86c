"""The cluster request read from a dry run: per-rule maxima and GPU-hours summed over jobs."""

from __future__ import annotations

from kvspec.plan.estimate import asks, dry_run_jobs, pairs, table

DRY_RUN = """
rule heal_train:
    input: a
    output: b
    resources: tmpdir=<TBD>, mem_mb=102400, runtime=600, gpu=8, gpu_mem_mb=71680, nodes=1

rule heal_train:
    output: c
    resources: tmpdir=<TBD>, mem_mb=51200, runtime=120, gpu=8, gpu_mem_mb=40960, nodes=1

localrule report_status:
    output: d
    resources: tmpdir=<TBD>, mem_mb=2048, runtime=30, gpu=0, gpu_mem_mb=0, nodes=1

rule all:
    input: d
"""


def test_maxima_per_rule_and_gpu_hours_over_jobs() -> None:
    got = asks(DRY_RUN)
    heal = got["heal_train"]
    assert (heal.jobs, heal.gpus, heal.gpu_gb, heal.host_gb, heal.hours) == (2, 8, 70, 100, 10)
    assert heal.gpu_hours == 8 * 10 + 8 * 2
    assert got["report_status"].gpu_hours == 0 and "all" not in got
    assert list(table(got))[-1].endswith("**96** |")


def test_jobs_and_their_fields_as_printed() -> None:
    jobs = dry_run_jobs(DRY_RUN)
    assert [rule for rule, _ in jobs] == ["heal_train", "heal_train", "report_status", "all"]
    assert jobs[0][1]["input"] == "a" and jobs[0][1]["output"] == "b"
    assert pairs(jobs[2][1]["resources"])["mem_mb"] == "2048"
