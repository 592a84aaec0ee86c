"""The remote stage's plan: one job per named head, its inputs, and its config checks."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from kvspec.config import ConfigError, validate
from kvspec.plan import Plan


def test_one_job_per_head_reading_the_moa_heads(configs, schema) -> None:
    plan = Plan(validate(copy.deepcopy(configs["ci"]), schema))
    assert plan.remote.outputs() == [f"results/remote/target/{d}.json"
                                     for d in ("ours_tli1", "eagle", "independent")]  # fmt: skip
    inputs = plan.remote.run_inputs(SimpleNamespace(model="target", drafter="eagle"))
    assert inputs["head"] == "results/moa/target/heads/eagle.pt"
    assert inputs["prompts"].endswith("humaneval.jsonl") and inputs["model"].endswith("target")
    settings = plan.remote.settings()
    assert settings["bench"]["kind"] == "code" and settings["tree"] == {"depth": 3, "topk": 2,
                                                                         "total": 6}  # fmt: skip
    stems = {i.rule for i in plan.report_items() if i.renderer.startswith("remote:")}
    assert stems == {"report_moa_table_3", "report_moa_table_4", "report_moa_table_7"}


@pytest.mark.parametrize(("key", "value", "message"), [
    ("drafters", ["nope"], "are not moa.drafters"),
    ("set", "gsm8k", "holding HumanEval problems"),
])  # fmt: skip
def test_bad_remote_blocks_are_refused(configs, schema, key, value, message) -> None:
    config = copy.deepcopy(configs["ci"])
    config["remote"][key] = value
    with pytest.raises(ConfigError, match=message):
        Plan(validate(config, schema))


def test_the_remote_block_needs_the_moa_block(configs, schema) -> None:
    with pytest.raises(ConfigError, match="'remote': needs the moa block"):
        validate(dict(configs["ci"], moa=None), schema)
