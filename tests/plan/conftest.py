"""Validated configs of the three scales, their plans, and the jobs Snakemake plans for them
(`dag_jobs`: a dry run of the real rule files, not a mirror of them)."""

from __future__ import annotations

import copy
import functools
import json
import re
import tempfile
from pathlib import Path

import pytest
import yaml

from kvspec.config import validate
from kvspec.plan import Plan

from ..conftest import FIXTURE_MIRROR, REPO, snakemake

SCALES = ("ci", "config", "paper")


def raw_config(scale: str) -> dict:
    """A scale's config file with the mirror pointed at the repository's test fixture (every
    dataset that has a mirror path needs one; the files themselves are never read here)."""
    cfg = yaml.safe_load((REPO / "config" / f"{scale}.yaml").read_text())
    cfg["data"]["mirror"] = str(FIXTURE_MIRROR)
    for decl in cfg["data"]["datasets"].values():
        decl.setdefault(
            "hub", {"path": "offline/none", "split": "test"}
        )  # no mirror file needed to validate
    return cfg


@pytest.fixture(scope="session")
def schema() -> dict:
    return yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())


@pytest.fixture(scope="session")
def configs(schema) -> dict[str, dict]:
    return {s: validate(raw_config(s), schema) for s in SCALES}


@pytest.fixture(scope="session")
def plans(configs) -> dict[str, Plan]:
    return {s: Plan(cfg) for s, cfg in configs.items()}


def edited(config: dict, schema: dict, *keys_and_value) -> Plan:
    """The plan of `config` with one nested value replaced."""
    cfg = copy.deepcopy(config)
    *keys, last, value = keys_and_value
    node = cfg
    for key in keys:
        node = node[key]
    node[last] = value
    return Plan(validate(cfg, schema))


# rule -> {first output of a job: every output of that job}
Jobs = dict[str, dict[str, tuple[str, ...]]]


def dag_jobs(config: dict) -> Jobs:
    """Every job `snakemake -n` plans for `config` (a validated config; its mirror is the
    repository's fixture, so no dataset is read), rule by rule."""
    return _dag_jobs(json.dumps(config, sort_keys=True))


@functools.lru_cache(maxsize=32)
def _dag_jobs(config_json: str) -> Jobs:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(json.loads(config_json)))
        seed = json.loads(config_json)["seed"]  # a --config keeps the helper off the mirror
        proc = snakemake(Path(tmp), "-n", "--configfile", str(path), "--config", f"seed={seed}")
    return dry_run_jobs(proc.stdout + proc.stderr)


def dry_run_jobs(text: str) -> Jobs:
    """rule -> {first output: outputs} from a dry run's job listing."""
    jobs: Jobs = {}
    for rule, body in re.findall(r"^(?:local)?rule (\w+):\n((?:    .*\n)+)", text, re.M):
        out = re.search(r"^    output: (.*)$", body, re.M)
        outputs = tuple(out[1].split(", ")) if out else (rule,)
        jobs.setdefault(rule, {})[outputs[0]] = outputs
    return jobs


def outputs_of(jobs: Jobs) -> set[str]:
    """Every file or directory some job writes."""
    return {f for by_rule in jobs.values() for outs in by_rule.values() for f in outs}


@pytest.fixture(scope="session")
def dags(configs) -> dict[str, Jobs]:
    return {s: dag_jobs(cfg) for s, cfg in configs.items()}
