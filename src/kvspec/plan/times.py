"""How long a target took, from its jobs' benchmark files, read from a forced dry run:

    snakemake -n --forceall thesis | python -m kvspec.plan.times

Per rule: the jobs, how many have a benchmark file in `benchmarks/` (the last time each ran),
and their summed wall seconds; then the total. Jobs whose rule has no `benchmark:` (bookkeeping
and report rules, seconds each) are counted apart, and a timed job never run here is named, so
an incomplete sum is never read as the target's time. Jobs shared by two targets count in
both; the sum is of job times, so jobs that ran side by side count twice (on 2 cores the
heavy ones do not: they hold the machine).
"""

from __future__ import annotations

import csv
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
    missing: list[str] = field(default_factory=list)


def benchmark_seconds(path: Path) -> float:
    """Wall seconds of one benchmark file (the mean of its repeats)."""
    with path.open() as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if not rows:
        raise ValueError(f"{path}: no benchmark rows")
    return statistics.fmean(float(row["s"]) for row in rows)


def rule_times(dry_run: str, root: Path = Path(".")) -> tuple[dict[str, RuleTime], int]:
    """rule -> its measured time (rules with a `benchmark:` only), and the untimed jobs."""
    out: dict[str, RuleTime] = defaultdict(RuleTime)
    untimed = 0
    for rule, fields in dry_run_jobs(dry_run):
        if rule == "all" or "benchmark" not in fields:
            untimed += rule != "all"
            continue
        entry, path = out[rule], root / fields["benchmark"]
        entry.jobs += 1
        if path.exists():
            entry.timed += 1
            entry.seconds += benchmark_seconds(path)
        else:
            entry.missing.append(fields["benchmark"])
    return dict(out), untimed


def hours_minutes(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def table(rules: dict[str, RuleTime], untimed: int) -> Iterable[str]:
    """A Markdown table per rule, the total, and the timed jobs with no benchmark file."""
    yield "| rule | jobs | with a benchmark | job time |"
    yield "|---|---:|---:|---:|"
    for rule, t in sorted(rules.items(), key=lambda kv: -kv[1].seconds):
        yield f"| {rule} | {t.jobs} | {t.timed} | {hours_minutes(t.seconds)} |"
    jobs, timed = sum(t.jobs for t in rules.values()), sum(t.timed for t in rules.values())
    total = hours_minutes(sum(t.seconds for t in rules.values()))
    yield f"| **total** | {jobs} | {timed} | **{total}** |"
    yield ""
    yield f"{untimed} more jobs have no benchmark (bookkeeping and report rules)."
    missing = [path for t in rules.values() for path in t.missing]
    if missing:
        yield f"INCOMPLETE: {len(missing)} timed jobs never ran here (the total is a lower bound):"
        yield from (f"- {path}" for path in missing)


def main(dry_run: str) -> str:
    """The table for a dry run's text; an empty dry run (snakemake failed) is an error."""
    rules, untimed = rule_times(dry_run)
    if not rules and not untimed:
        raise SystemExit("kvspec.plan.times: no jobs in the dry run on stdin (did snakemake "
                         "fail? run it without the pipe to see why)")  # fmt: skip
    return "\n".join(table(rules, untimed))


if __name__ == "__main__":
    print(main(sys.stdin.read()))
