"""Shared fixtures: repository paths, the offline mirror, the validated configs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .second_device import second_device  # noqa: F401 (a fixture: a second torch device)

REPO = Path(__file__).resolve().parents[1]
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs two workers on two cores: one
    import torch  # thread each, or four threads contend for two cores

    torch.set_num_threads(1)
FIXTURE_MIRROR = REPO / "tests" / "fixtures" / "mirror"


def shared_mirror() -> Path | None:
    """The offline dataset mirror (KVSPEC_DATA_MIRROR, else ../shared/data), if present."""
    env = os.environ.get("KVSPEC_DATA_MIRROR")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    return path if path.is_dir() else None


@pytest.fixture(scope="session")
def schema() -> dict:
    return yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())


@pytest.fixture()
def mini_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.fixture()
def ci_config() -> dict:
    """The ci scale's config file (the scale that pretrains models from scratch)."""
    return yaml.safe_load((REPO / "config" / "ci.yaml").read_text())


SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the workflow in `workdir` (ci config and the offline mirror unless overridden)."""
    cmd = [
        *SNAKEMAKE,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        "2",
        *args,
    ]
    if "--configfile" not in args:
        cmd += ["--configfile", str(REPO / "config" / "ci.yaml")]
    if "--config" not in args:
        cmd += ["--config", f"data={{'mirror': '{shared_mirror()}'}}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if check and proc.returncode:
        raise AssertionError(f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def planned_jobs(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """Job counts per rule from a dry run's job-stats table."""
    text = proc.stdout + proc.stderr
    table = text.split("Job stats:")[-1] if "Job stats:" in text else ""
    rows = re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)
    return {m[1]: int(m[2]) for m in rows if m[1] != "total"}


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory) -> Path:
    """The whole DAG at ci scale, run once per test session; tests read its outputs."""
    if shared_mirror() is None:
        pytest.skip("offline data mirror not present")
    workdir = tmp_path_factory.mktemp("ci_run")
    snakemake(workdir)
    return workdir


WORKFLOW_TESTS = REPO / "tests" / "workflow"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/workflow/ `workflow`: they run Snakemake (the ci DAG once per
    session, interrupted runs, Slurm) and take most of the suite's time. `make test` leaves them
    out; `make test-all` (what CI runs) keeps them."""
    for item in items:
        if WORKFLOW_TESTS in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.workflow)
