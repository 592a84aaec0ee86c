"""A target's time from its jobs' benchmark files: summed per rule, jobs without a benchmark
directive counted apart, and a timed job that never ran named (the total is then a bound);
machine time weighs each job by the share of the cores it held."""

from __future__ import annotations

import pytest

from kvspec.plan.times import benchmark_seconds, hours_minutes, main, rule_times, table

DRY_RUN = """
rule heal_train:
    output: a
    benchmark: benchmarks/heal/a.tsv

rule heal_train:
    output: b
    benchmark: benchmarks/heal/b.tsv
    threads: 2

rule models_distil:
    output: c
    benchmark: benchmarks/models/c.tsv

localrule report_status:
    output: d

rule all:
    input: d
"""
HEADER = "s\th:m:s\tmax_rss\n"


def _bench(root, name: str, *seconds: float) -> None:
    path = root / "benchmarks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{s}\t0:00:00\t1.0\n" for s in seconds))


def test_jobs_summed_per_rule_and_a_missing_one_named(tmp_path) -> None:
    _bench(tmp_path, "heal/a.tsv", 3000.0)
    _bench(tmp_path, "models/c.tsv", 100.0, 140.0)  # two repeats: their mean
    rules, untimed = rule_times(DRY_RUN, tmp_path)
    assert untimed == 1 and set(rules) == {"heal_train", "models_distil"}  # not `all`
    heal = rules["heal_train"]
    assert (heal.jobs, heal.timed, heal.seconds) == (2, 1, 3000.0)
    assert heal.missing == ["benchmarks/heal/b.tsv"]
    assert rules["models_distil"].seconds == pytest.approx(120.0)
    text = "\n".join(table(rules, untimed))
    assert "| **total** | 3 | 2 | **52 min** | **52 min** |" in text  # cores=1: the same
    assert "INCOMPLETE: 1 timed jobs" in text and "- benchmarks/heal/b.tsv" in text
    _bench(tmp_path, "heal/b.tsv", 600.0)
    text = "\n".join(table(*rule_times(DRY_RUN, tmp_path)))
    assert "**1 h 2 min**" in text and "INCOMPLETE" not in text


def test_machine_time_weighs_each_job_by_the_cores_it_held(tmp_path, monkeypatch) -> None:
    """On 2 cores a one-thread job holds half the machine, a two-thread job all of it; a job
    asking for more threads than there are cores holds them all, never more."""
    _bench(tmp_path, "heal/a.tsv", 1200.0)  # no threads printed: 1
    _bench(tmp_path, "heal/b.tsv", 600.0)  # threads: 2
    _bench(tmp_path, "models/c.tsv", 360.0)
    rules, _ = rule_times(DRY_RUN, tmp_path, cores=2)
    assert rules["heal_train"].seconds == pytest.approx(1800.0)
    assert rules["heal_train"].machine == pytest.approx(1200.0 / 2 + 600.0)
    assert rules["models_distil"].machine == pytest.approx(180.0)
    monkeypatch.chdir(tmp_path)  # main reads benchmarks/ from the working directory
    text = main(DRY_RUN.replace("threads: 2", "threads: 8"), cores=2)
    assert "| heal_train | 2 | 2 | 30 min | 20 min |" in text
    assert "| **total** | 3 | 3 | **36 min** | **23 min** |" in text
    with pytest.raises(ValueError, match="cores must be >= 1"):
        rule_times(DRY_RUN, tmp_path, cores=0)


def test_time_formats_and_an_empty_benchmark_refused(tmp_path) -> None:
    assert hours_minutes(59) == "1 min" and hours_minutes(3600 * 2 + 61) == "2 h 1 min"
    (tmp_path / "empty.tsv").write_text(HEADER)
    with pytest.raises(ValueError, match="no benchmark rows"):
        benchmark_seconds(tmp_path / "empty.tsv")


def test_an_empty_dry_run_is_an_error_not_a_zero_total() -> None:
    with pytest.raises(SystemExit, match="no jobs in the dry run"):
        main("Error in rule x:\n")
