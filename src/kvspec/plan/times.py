"""How long a target took, from its jobs' benchmark files, read from a forced dry run given
the cores the study ran on (the dry run and this module the same number):

    snakemake -n --forceall --cores 2 thesis | python -m kvspec.plan.times --cores 2

Per rule: the jobs, how many have a benchmark file in `benchmarks/` (the last time each ran),
their summed wall seconds (job time), and their machine time: each job's seconds times the
share of the cores it held (`threads:` as the dry run prints them, over the cores given). Job
time counts twice the jobs that ran side by side; machine time counts each once, so while
Snakemake keeps every core busy (it does when jobs are ready) it approaches the target's wall
time. Jobs whose rule has no `benchmark:` (bookkeeping and report rules, seconds each) are
counted apart, and a timed job never run here is named, so an incomplete sum is never read as
the target's time. Jobs shared by two targets count in both.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kvspec.plan.estimate import dry_run_jobs


@dataclass
class RuleTime:
    """A rule's jobs, those with a benchmark file, their seconds, and those without one."""

    jobs: int = 0
    timed: int = 0
    seconds: float = 0.0
    machine: float = 0.0  # seconds x the share of the cores each job held
    missing: list[str] = field(default_factory=list)


def benchmark_seconds(path: Path) -> float:
    """Wall seconds of one benchmark file (the mean of its repeats)."""
    with path.open() as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if not rows:
        raise ValueError(f"{path}: no benchmark rows")
    return statistics.fmean(float(row["s"]) for row in rows)


def rule_times(
    dry_run: str, root: Path = Path("."), cores: int = 1
) -> tuple[dict[str, RuleTime], int]:
    """rule -> its measured time (rules with a `benchmark:` only), and the untimed jobs.
    A job's threads are as the dry run printed them (none printed: 1), of `cores`."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    out: dict[str, RuleTime] = defaultdict(RuleTime)
    untimed = 0
    for rule, fields in dry_run_jobs(dry_run):
        if rule == "all" or "benchmark" not in fields:
            untimed += rule != "all"
            continue
        entry, path = out[rule], root / fields["benchmark"]
        entry.jobs += 1
        if path.exists():
            seconds, threads = benchmark_seconds(path), int(fields.get("threads", 1))
            entry.timed += 1
            entry.seconds += seconds
            entry.machine += seconds * min(threads, cores) / cores
        else:
            entry.missing.append(fields["benchmark"])
    return dict(out), untimed


def hours_minutes(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def table(rules: dict[str, RuleTime], untimed: int) -> Iterable[str]:
    """A Markdown table per rule, the total, and the timed jobs with no benchmark file."""
    yield "| rule | jobs | with a benchmark | job time | machine time |"
    yield "|---|---:|---:|---:|---:|"
    for rule, t in sorted(rules.items(), key=lambda kv: -kv[1].machine):
        yield (f"| {rule} | {t.jobs} | {t.timed} | {hours_minutes(t.seconds)} "
               f"| {hours_minutes(t.machine)} |")  # fmt: skip
    jobs, timed = sum(t.jobs for t in rules.values()), sum(t.timed for t in rules.values())
    total = hours_minutes(sum(t.seconds for t in rules.values()))
    machine = hours_minutes(sum(t.machine for t in rules.values()))
    yield f"| **total** | {jobs} | {timed} | **{total}** | **{machine}** |"
    yield ""
    yield f"{untimed} more jobs have no benchmark (bookkeeping and report rules)."
    missing = [path for t in rules.values() for path in t.missing]
    if missing:
        yield f"INCOMPLETE: {len(missing)} timed jobs never ran here (the total is a lower bound):"
        yield from (f"- {path}" for path in missing)


def main(dry_run: str, cores: int = 1) -> str:
    """The table for a dry run's text; an empty dry run (snakemake failed) is an error."""
    rules, untimed = rule_times(dry_run, cores=cores)
    if not rules and not untimed:
        raise SystemExit("kvspec.plan.times: no jobs in the dry run on stdin (did snakemake "
                         "fail? run it without the pipe to see why)")  # fmt: skip
    return "\n".join(table(rules, untimed))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                        help="the dry run's cores (default: this machine's)")  # fmt: skip
    print(main(sys.stdin.read(), parser.parse_args().cores))
