"""Validated configs of the three scales and their plans (no Snakemake involved)."""

from __future__ import annotations

import copy

import pytest
import yaml

from kvspec.config import validate
from kvspec.plan import Plan

from ..conftest import FIXTURE_MIRROR, REPO

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
