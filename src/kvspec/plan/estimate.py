"""What a scale asks a cluster for, read from a dry run: per rule, the jobs, GPUs, GPU memory,
host memory, wall time and GPU-hours the resource model (`kvspec.plan.resources`) requests.

    snakemake -n thesis --configfile config/paper.yaml | python -m kvspec.plan.estimate

GPU-hours are requested hours (with the resource model's x1.5 wall-time margin and its
30-minute minimum), so they bound what the jobs should use.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

JOB = re.compile(r"^(?:local)?rule (\w+):\n((?:    .*\n)+)", re.M)


@dataclass
class RuleAsk:
    """The largest single-job request of a rule and the GPU-hours of all its jobs."""

    jobs: int = 0
    gpus: int = 0
    gpu_gb: float = 0.0
    host_gb: float = 0.0
    hours: float = 0.0
    nodes: int = 1
    gpu_hours: float = 0.0


def dry_run_jobs(dry_run: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, {field: value}) of every job the text of `snakemake -n` lists (`input`, `output`,
    `wildcards`, `resources`, ... as printed)."""
    return [(rule, dict(re.findall(r"^    (\w+): (.*)$", body, re.M)))
            for rule, body in JOB.findall(dry_run)]  # fmt: skip


def pairs(field: str) -> dict[str, str]:
    """A printed `key=value, key=value` field (resources, wildcards) as a dict."""
    return dict(kv.split("=", 1) for kv in field.split(", ") if "=" in kv)


def asks(dry_run: str) -> dict[str, RuleAsk]:
    """rule -> its request, from the text of `snakemake -n`."""
    out: dict[str, RuleAsk] = defaultdict(RuleAsk)
    for rule, fields in dry_run_jobs(dry_run):
        if "resources" not in fields:
            continue
        res = pairs(fields["resources"])
        gpus, hours = int(res.get("gpu", 0)), int(res.get("runtime", 0)) / 60
        ask = out[rule]
        ask.jobs += 1
        ask.gpus = max(ask.gpus, gpus)
        ask.gpu_gb = max(ask.gpu_gb, int(res.get("gpu_mem_mb", 0)) / 1024)
        ask.host_gb = max(ask.host_gb, int(res.get("mem_mb", 0)) / 1024)
        ask.hours = max(ask.hours, hours)
        ask.nodes = max(ask.nodes, int(res.get("nodes", 1)))
        ask.gpu_hours += gpus * hours
    return dict(out)


def table(rules: dict[str, RuleAsk]) -> Iterable[str]:
    """A Markdown table of the rules' requests, with the total GPU-hours."""
    yield (
        "| rule | jobs | GPUs (max) | GPU GB | host GB | hours requested (max) | nodes "
        "| GPU-hours |"
    )
    yield "|---|---:|---:|---:|---:|---:|---:|---:|"
    for rule, a in sorted(rules.items()):
        yield (f"| {rule} | {a.jobs} | {a.gpus} | {a.gpu_gb:.0f} | {a.host_gb:.0f} | "
               f"{a.hours:.1f} | {a.nodes} | {a.gpu_hours:.1f} |")  # fmt: skip
    yield f"| **total** | {sum(a.jobs for a in rules.values())} | | | | | | " \
          f"**{sum(a.gpu_hours for a in rules.values()):.0f}** |"  # fmt: skip


if __name__ == "__main__":
    print("\n".join(table(asks(sys.stdin.read()))))
