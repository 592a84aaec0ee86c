"""Long stages killed mid-run (SIGKILL of Snakemake and the job, like a node crash) rerun to the
outputs of an uninterrupted run, at ci scale.

Each case copies the session's ci run (results hard-linked; nothing is written in place), edits
the config so the stage runs long enough to be caught mid-run, runs the stage once straight
through and once killed as soon as its journal or checkpoint shows finished work, then
unlocks and reruns it. Deterministic stages must come back bit-identical (model weights, loss
curves, generated tokens); timings are measured anew and left out of the comparison.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from ..conftest import REPO, SNAKEMAKE, planned_jobs, shared_mirror, snakemake

pytestmark = pytest.mark.skipif(shared_mirror() is None, reason="offline data mirror not present")


@dataclass(frozen=True)
class Case:
    rule: str
    target: str  # one output of the job (the rest of its outputs come along)
    marker: str  # exists (non-empty) only while the job runs and has finished some work
    edits: dict[str, Any]  # config edits that make the job long enough to be caught


CASES = {
    "generate_responses": Case(
        "generate_responses", "results/generate/target/shards/0.jsonl",
        "resources/checkpoints/generate/target/0.jsonl",
        {"spec.generate.batch_size": 1, "spec.generate.max_new_tokens": 24},
    ),
    "moa_train": Case(
        "moa_train", "results/moa/target/heads/eagle.pt", "results/moa/target/heads/eagle.pt.ckpt",
        {"moa.train": {"steps": 16, "batch_size": 2, "lr": 0.001, "warmup_steps": 1,
                       "eval_every": 4, "ckpt_every": 2}},
    ),
    "heal_train": Case(
        "heal_train", "results/heal/target/svd/stats.json",
        "resources/checkpoints/heal/target/svd.pt", {"care.heal.train.budgets": [256, 3072]},
    ),
    "sampling_humaneval": Case(
        "sampling_humaneval", "results/sampling/humaneval/sd_B.json",
        "resources/checkpoints/sampling/humaneval/sd_B.jsonl",
        {"sampling.humaneval.completions": 8, "sampling.humaneval.max_new_tokens": 16},
    ),
    "pipeline_run": Case(
        "pipeline_run", "results/pipeline/target/runs.json",
        "resources/checkpoints/pipeline/target.jsonl",
        # without the two ablation strategies: each launch of ranks costs ~20 s at ci, and four
        # strategies journal and resume as six do
        {"pipeline.max_new_tokens": 16, "pipeline.ablations": []},
    ),
}  # fmt: skip


def _edit(cfg: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = cfg
    for key in parents:
        node = node[key]
    node[last] = value


def _link_copy(src: Path, dst: Path) -> Path:
    """The ci run's files: results and resources hard-linked (jobs replace files, never write
    into them), logs and Snakemake's metadata copied (those are written in place)."""
    for top in ("results", "resources"):
        if (src / top).exists():
            shutil.copytree(src / top, dst / top, copy_function=os.link, symlinks=True)
    for top in ("logs", "benchmarks", ".snakemake/metadata"):
        if (src / top).exists():
            shutil.copytree(src / top, dst / top, symlinks=True)
    return dst


def _start(workdir: Path, case: Case, config: Path, log: Path) -> subprocess.Popen:
    mirror = f"data={{'mirror': '{shared_mirror()}'}}"
    cmd = [*SNAKEMAKE, case.target, "--forcerun", case.rule, "--snakefile",
           str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", "2",
           "--configfile", str(config), "--config", mirror]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip


def _kill_when(marker: Path, proc: subprocess.Popen, timeout: float) -> None:
    """SIGKILL the whole run (Snakemake and its job) once `marker` holds finished work."""
    deadline = time.monotonic() + timeout
    while not (marker.exists() and marker.stat().st_size > 0):
        if proc.poll() is not None:
            raise AssertionError(f"the run ended ({proc.returncode}) before {marker} appeared")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"{marker} did not appear within {timeout}s")
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.fixture(scope="module", params=sorted(CASES))
def interrupted(request, ci_run: Path, tmp_path_factory) -> dict[str, Any]:
    """One stage run straight through and killed-then-rerun on copies of the ci run."""
    case = CASES[request.param]
    base = tmp_path_factory.mktemp(f"interrupt-{case.rule}")
    cfg = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
    for key, value in case.edits.items():
        _edit(cfg, key, value)
    config = base / "config.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    straight, killed = (_link_copy(ci_run, base / name) for name in ("straight", "killed"))
    plan = planned_jobs(snakemake(killed, "-n", case.target, "--forcerun", case.rule,
                                  "--configfile", str(config)))  # fmt: skip
    assert plan == {case.rule: 1}, plan  # the copied inputs are up to date: the stage alone
    proc = _start(killed, case, config, base / "killed.log")
    _kill_when(killed / case.marker, proc, timeout=600)
    after_kill = (killed / case.target).exists()
    snakemake(killed, "--unlock", "--configfile", str(config))  # SIGKILL leaves the lock
    snakemake(killed, case.target, "--rerun-incomplete", "--configfile", str(config))
    snakemake(straight, case.target, "--forcerun", case.rule, "--configfile", str(config))
    log = (base / "killed.log").read_text()
    return {"case": case, "straight": straight, "killed": killed, "after_kill": after_kill,
            "log": log}  # fmt: skip


def test_the_kill_leaves_no_output_and_the_rerun_finishes(interrupted) -> None:
    case, killed = interrupted["case"], interrupted["killed"]
    assert not interrupted["after_kill"], f"{case.target} existed right after the kill"
    assert (killed / case.target).exists()
    assert not (killed / case.marker).exists()  # the journal is removed with the output written


def test_the_rerun_equals_the_uninterrupted_run(interrupted) -> None:
    case = interrupted["case"]
    SAME[case.rule](interrupted["straight"], interrupted["killed"])


# ---- what "the same outputs" means per stage ---------------------------------------------------
def _same_text(rel: str) -> Callable[[Path, Path], None]:
    def check(a: Path, b: Path) -> None:
        assert (a / rel).read_text() == (b / rel).read_text()

    return check


def _same_curve(a: pd.DataFrame, b: pd.DataFrame) -> None:
    measured = [c for c in a.columns if c not in ("seconds", "tokens_per_s")]
    pd.testing.assert_frame_equal(a[measured], b[measured], check_exact=True)


def _same_head(a: Path, b: Path) -> None:
    import torch

    rel = CASES["moa_train"].target
    ha, hb = (torch.load(d / rel, map_location="cpu", weights_only=False) for d in (a, b))
    weights = [k for k, v in ha.items() if isinstance(v, dict) and k.endswith("state")]
    assert weights, sorted(ha)
    for key in weights:
        assert ha[key].keys() == hb[key].keys()
        assert all(torch.equal(ha[key][n], hb[key][n]) for n in ha[key]), key
    _same_curve(pd.DataFrame(ha["curve"]), pd.DataFrame(hb["curve"]))


def _same_healing(a: Path, b: Path) -> None:
    import torch
    from safetensors.torch import load_file

    run = Path("results/heal/target/svd")
    _same_curve(*(pd.read_csv(d / run / "curve.csv") for d in (a, b)))
    for ckpt in sorted((a / run).glob("tokens-*")):
        for f in sorted(ckpt.glob("*.safetensors")):
            wa, wb = load_file(f), load_file(b / f.relative_to(a))
            assert all(torch.equal(wa[k], wb[k]) for k in wa), f


def _same_samples(a: Path, b: Path) -> None:
    ra, rb = (json.loads((d / CASES["sampling_humaneval"].target).read_text()) for d in (a, b))
    assert ra["pass@k"] == rb["pass@k"] and ra["per_task"] == rb["per_task"]
    kept = ("sample", "task_id", "completion", "tokens", "steps", "drafted", "accepted")
    assert [{k: r.get(k) for k in kept} for r in ra["runs"]] == [
        {k: r.get(k) for k in kept} for r in rb["runs"]
    ]


def _same_pipeline_tokens(a: Path, b: Path) -> None:
    """Tokens and exactness only: every run is timed, and journalled runs keep the timings
    measured before the kill."""
    ra, rb = (json.loads((d / CASES["pipeline_run"].target).read_text()) for d in (a, b))
    kept = ("set", "prompt", "run", "strategy", "n_stages", "tokens", "exact")
    assert [{k: r.get(k) for k in kept} for r in ra["runs"]] == [
        {k: r.get(k) for k in kept} for r in rb["runs"]
    ]
    assert all(r["exact"] for r in rb["runs"])


SAME: dict[str, Callable[[Path, Path], None]] = {
    "generate_responses": _same_text(CASES["generate_responses"].target),
    "moa_train": _same_head,
    "heal_train": _same_healing,
    "sampling_humaneval": _same_samples,
    "pipeline_run": _same_pipeline_tokens,
}
