"""Lint of the deployment files: conda environments in envs/ and the Slurm profile.

Conda itself is not reachable here, so the envs are checked statically: each env file parses
and pins every package exactly as pyproject.toml does, every rule's `conda:` names an existing
env, and the env of each rule provides every third-party package its script can import
(following imports through kvspec's modules). The profile is run for real by test_slurm.py;
here its rule names and placeholders are checked.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
import yaml

from ..conftest import REPO

ENVS = REPO / "envs"
RULE_GROUP_ENVS = {"training", "evaluation", "report"}


def normalize(name: str) -> str:
    """PEP 503 normalized distribution name, without extras."""
    return re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()


def pyproject_pins() -> dict[str, str]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for dep in deps:
        name, _, version = dep.partition("==")
        pins[normalize(name.strip())] = version.strip()
    return pins


def env_packages(env: dict) -> dict[str, str]:
    """{distribution: version} of an env file's pinned pip requirements."""
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    out = {}
    for req in pip:
        name, sep, version = req.partition("==")
        assert sep, f"unpinned requirement {req!r}"
        out[normalize(name)] = version
    return out


def env_files() -> list[Path]:
    return sorted(ENVS.glob("*.yaml"))


def test_rule_group_envs_exist() -> None:
    assert {p.stem for p in env_files()} >= RULE_GROUP_ENVS


@pytest.mark.parametrize("path", env_files(), ids=lambda p: p.name)
def test_env_parses_and_pins_match_pyproject(path: Path) -> None:
    env = yaml.safe_load(path.read_text())
    assert env["channels"][0] == "conda-forge" and "defaults" not in env["channels"]
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert any(re.fullmatch(r"python=3\.11(\.\*)?", d) for d in conda), conda
    assert all("=" in d for d in conda), f"unpinned conda package in {conda}"
    pins, packages = pyproject_pins(), env_packages(env)
    assert packages, path
    for name, version in packages.items():
        assert name in pins, f"{path.name}: {name} is not a dependency in pyproject.toml"
        assert version == pins[name], f"{path.name}: {name}=={version}, pyproject {pins[name]}"


@pytest.mark.parametrize("path", env_files(), ids=lambda p: p.name)
def test_post_deploy_installs_the_package_without_dependencies(path: Path) -> None:
    """Snakemake creates envs from a copy in .snakemake/conda, so a relative `-e ../` in the
    env file would point nowhere; the post-deploy script installs kvspec instead, with
    --no-deps so that the env's own pins are what it runs with."""
    script = path.with_name(path.stem + ".post-deploy.sh")
    assert script.is_file(), script
    assert re.search(r"pip install --no-deps -e", script.read_text())


def rule_envs_and_scripts() -> list[tuple[str, str, str]]:
    """(rule, env name, script file) for every rule in workflow/rules/*.smk."""
    found = []
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        blocks = re.split(r"^\s*rule\b", smk.read_text(), flags=re.M)[1:]
        for block in blocks:
            name = block.split(":", 1)[0].strip() or f"{smk.stem} (loop over the plan's items)"
            env = re.search(r'env_path\(\s*"([^"]+)"\s*\)', block)
            script = re.search(r'script_path\(\s*"([^"]+)"\s*\)', block)
            assert env and script, f"{smk.name}: rule {name} lacks conda: or script:"
            found.append((name, env[1], script[1]))
    return found


def test_every_rule_names_an_existing_env() -> None:
    rules = rule_envs_and_scripts()
    assert len(rules) >= 8
    for rule, env, _ in rules:
        assert (ENVS / f"{env}.yaml").is_file(), f"rule {rule}: envs/{env}.yaml missing"


def imported_modules(path: Path) -> set[str]:
    """Every module name imported anywhere in a Python file (lazy imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def kvspec_file(module: str) -> Path | None:
    base = REPO / "src" / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def third_party_imports(path: Path) -> frozenset[str]:
    """Top-level third-party module names reachable from `path` through kvspec modules."""
    seen, todo, found = set(), [path], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for module in imported_modules(current):
            top = module.split(".")[0]
            if top == "kvspec":
                target = kvspec_file(module)
                if target is not None:
                    todo.append(target)
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.add(top)
    return frozenset(found)


@cache
def installed_modules() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distributions(module: str) -> set[str]:
    """Distributions (installed here) that provide an importable top-level module."""
    provided = installed_modules().get(module, [])
    return {normalize(d) for d in provided}


REPORT_MODULES = sorted((REPO / "src" / "kvspec" / "report").glob("*.py"))


def script_imports(script: str) -> frozenset[str]:
    """Third-party imports of a rule script; report_item.py reaches every renderer through
    importlib (kvspec.report.render), so all kvspec.report modules count."""
    found = third_party_imports(REPO / "scripts" / script)
    if script == "report_item.py":
        found = found.union(*map(third_party_imports, REPORT_MODULES))
    return found


@pytest.mark.parametrize("path", REPORT_MODULES, ids=lambda p: p.name)
def test_report_layer_does_not_import_torch(path: Path) -> None:
    """The report environment has no torch: tables and figures read only result files."""
    assert not third_party_imports(path) & {"torch", "transformers", "infini_gram"}


# modules a rule builds from a pinned source release into resources/ (imported from there, not
# from the environment; importable in this process once a test has built one)
BUILT_BY_RULES = {"arctic_inference": "specdecode_arctic_build",
                  "llama_cpp": "specdecode_llamacpp_build"}  # fmt: skip


def test_each_rule_env_provides_what_its_script_imports() -> None:
    missing = []
    for rule, env, script in rule_envs_and_scripts():
        packages = set(env_packages(yaml.safe_load((ENVS / f"{env}.yaml").read_text())))
        for module in script_imports(script) - set(BUILT_BY_RULES):
            dists = distributions(module)
            if dists and not dists & packages:
                missing.append(f"rule {rule} (envs/{env}.yaml) imports {module} ({dists})")
    assert not missing, "\n".join(missing)


def test_slurm_profile_names_real_rules_and_marks_site_values() -> None:
    """Snakemake silently ignores set-resources of unknown rules, so a typo would go unseen."""
    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    profile = yaml.safe_load(text)
    assert profile["executor"] == "slurm"
    rules = {rule for rule, _, _ in rule_envs_and_scripts()}
    unknown = set(profile["set-resources"]) - rules
    assert not unknown, f"set-resources for rules that do not exist: {unknown}"
    for line in text.splitlines():
        if re.search(r'"<[A-Z_]+>"', line):
            assert "SITE" in line, f"placeholder without a SITE comment: {line}"
        elif line.strip() and not line.lstrip().startswith("#"):
            assert "#" in line or line.rstrip().endswith(":"), f"uncommented entry: {line}"


def merged_profile_args(*names: str) -> argparse.Namespace:
    """Snakemake's parsed arguments from the named profiles, later ones winning per key."""
    from snakemake.cli import get_argument_parser

    return get_argument_parser(profiles=[str(REPO / "profiles" / n) for n in names]).parse_args([])


@pytest.mark.parametrize("name", ["slurm", "slurm-cpu"])
def test_workflow_profile_keeps_every_slurm_profile_setting(name: str) -> None:
    """`snakemake --profile profiles/<name>` also reads profiles/default, whose keys win per key."""
    slurm, default = (
        yaml.safe_load((REPO / "profiles" / n / "config.yaml").read_text())
        for n in (name, "default")
    )
    changed = [key for key in slurm if key in default and default[key] != slurm[key]]
    assert not changed, f"profiles/default overrides {name}'s {changed}"
    assert merged_profile_args(name, "default").latency_wait == slurm["latency-wait"]


def test_make_reproduce_reevaluates_the_schedule_rarely() -> None:
    """Every finished job adds a timer chain firing once per timespan (see the Makefile)."""
    from snakemake.settings.types import MaxJobsPerTimespan

    run = subprocess.run(["make", "-n", "reproduce"], cwd=REPO, capture_output=True, text=True)
    command = next(line for line in run.stdout.splitlines() if "snakemake" in line)
    limit = re.search(r"--max-jobs-per-timespan (\S+)", command)
    assert limit, command
    assert MaxJobsPerTimespan.parse_choice(limit.group(1)).timespan >= 10
