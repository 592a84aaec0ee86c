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


def _rule_scripts() -> dict[str, str]:
    """{rule: its script's text} from workflow/rules/*.smk (`rule X:` … `script_path("Y")`)."""
    import re

    from ..conftest import REPO

    scripts = {}
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        text = smk.read_text()
        for rule, body in re.findall(r"rule (\w+):(.*?)(?=\n\s*rule \w+:|\Z)", text, re.S):
            found = re.search(r'script_path\("([\w.]+)"\)', body)
            if found:
                scripts[rule] = (REPO / "scripts" / found.group(1)).read_text()
    return scripts


def test_every_job_setting_reaches_its_stage(plans) -> None:
    """A script that names its stage's arguments passes every key of its job params (or reads
    that name from its inputs): a key added to the plan but not to such a script would reach no
    stage (the decode engine did, once); scripts passing `**job` pass them all."""
    from kvspec.plan.params import RULES

    scripts = _rule_scripts()
    assert {"sampling_pilot", "specdecode_speed", "moa_bench"} <= set(scripts)
    for rule, text in scripts.items():
        if rule not in RULES or "**job" in text or "**snakemake.params.job" in text:
            continue
        for plan in plans.values():
            try:
                keys = RULES[rule](plan, plan.config)
            except (KeyError, TypeError):
                continue  # a block this scale does not configure
            passed = [f'job["{k}"]' in text or f"snakemake.input.{k}" in text for k in keys]
            missing = [k for k, ok in zip(keys, passed, strict=True) if not ok]
            assert not missing, f"scripts for {rule} never pass {missing}"
