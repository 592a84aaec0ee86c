"""The ci-scale workflow through `snakemake --profile profiles/slurm-cpu` on a real single-node
Slurm (the paper scale's submissions through `profiles/slurm`: test_slurm_submit.py).

The first test copies profiles/slurm-cpu, replaces its site placeholders with the local cluster's
partition (no account, no GPUs, squeue status polling since accounting is off), runs the
data -> pretraining -> report part of the ci DAG on Slurm and compares every output with the
local run of the same session (`ci_run`). The whole ci DAG (CARE and speculative-decoding stages
included, >100 jobs) would take far longer through a one-node scheduler than the test budget
allows; the targets below still cover every kind of job: the profile's job groups, directory
outputs, multi-threaded training and a report with fan-in.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ..conftest import REPO, SNAKEMAKE, shared_mirror
from ..local_slurm import LocalSlurm, SlurmUnavailable, missing_requirements, node_resources

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.skipif(shared_mirror() is None, reason="offline data mirror not present"),
    pytest.mark.skipif(missing_requirements() is not None, reason=str(missing_requirements())),
]

SLURM_RUN_TIMEOUT = 900  # seconds; the whole test suite must stay well under 15 min
# Rules (no wildcards) run as targets on Slurm; everything upstream of them runs there too.
TARGETS = ["report_pretrain", "report_table_2_1"]
PLACEHOLDER_PARTITION = "debug"  # the local cluster's only partition


def is_placeholder(value: object) -> bool:
    return isinstance(value, str) and value.startswith("<") and value.endswith(">")


def localize(resources: dict, node_cpus: int, node_mem_mb: int) -> dict:
    """One resource block of the site profile made to fit the local node: placeholder
    partitions become `debug`, other placeholders (account, GPU model) and GPU requests go
    (the node has no GPU), cores and memory are capped to what the node has."""
    out = {}
    for key, value in resources.items():
        if key == "slurm_partition":
            out[key] = PLACEHOLDER_PARTITION if is_placeholder(value) else value
        elif is_placeholder(value) or key in ("gpu", "gpu_model", "cpus_per_gpu"):
            continue
        elif key == "mem_mb":
            out[key] = min(int(value), node_mem_mb // 4)  # two jobs side by side
        elif key == "cpus_per_task":
            out[key] = min(int(value), node_cpus)
        else:
            out[key] = value
    return out


def local_profile(dest: Path, node_cpus: int, node_mem_mb: int) -> Path:
    """profiles/slurm-cpu localized for the test cluster, written to `dest`/config.yaml."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm-cpu" / "config.yaml").read_text())
    profile["default-resources"] = localize(profile["default-resources"], node_cpus, node_mem_mb)
    profile.update(
        {
            "slurm-no-account": True,
            "slurm-status-command": "squeue",  # accounting is off: sacct would wait forever
            "slurm-init-seconds-before-status-checks": 2,
            "latency-wait": 10,
            "retries": 0,  # a failure here is a bug, not a flaky node
            "jobs": 4,
        }
    )
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return dest


def run_bounded(cmd: list[str], cwd: Path, log: Path, timeout: float) -> int:
    """Run `cmd` in its own process group; SIGKILL the group after `timeout` seconds
    (Snakemake waiting on a stuck status poll ignores SIGTERM)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            raise AssertionError(f"snakemake on Slurm still running after {timeout}s") from None


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory) -> tuple[Path, float]:
    """The whole ci DAG run through the (localized) Slurm profile; (workdir, seconds)."""
    base = tmp_path_factory.mktemp("slurm")
    try:
        cluster = LocalSlurm(base / "cluster").__enter__()
    except SlurmUnavailable as err:
        pytest.skip(f"local Slurm could not start: {err}")
    try:
        _, cpus, mem_mb = node_resources()
        profile = local_profile(base / "profile", cpus, mem_mb)
        workdir = base / "work"
        workdir.mkdir()
        cmd = [
            *SNAKEMAKE,
            *TARGETS,  # before --config, which swallows the words after it
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "--profile",
            str(profile),
            "--configfile",
            str(REPO / "config" / "ci.yaml"),
            "--config",
            f"data={{'mirror': '{shared_mirror()}'}}",
        ]
        t0 = time.monotonic()
        code = run_bounded(cmd, workdir, base / "snakemake.log", SLURM_RUN_TIMEOUT)
        seconds = time.monotonic() - t0
        log = (base / "snakemake.log").read_text(errors="replace")
        assert code == 0, f"snakemake on Slurm failed ({code}):\n{log[-6000:]}"
        print(f"ci DAG on local Slurm: {seconds:.0f} s")
        return workdir, seconds, log
    finally:
        cluster.__exit__(None, None, None)


def relative_files(root: Path, sub: str) -> set[str]:
    """Files under root/sub, as paths relative to root."""
    return {str(p.relative_to(root)) for p in (root / sub).rglob("*") if p.is_file()}


def test_every_job_ran_as_a_slurm_job(slurm_run) -> None:
    _, _, log = slurm_run
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", log)
    # group "data" (the data_normalize jobs), group "prep" (corpus, tokenizer, token
    # streams), two pretraining jobs (the draft is distilled), two reports: six submissions
    assert len(submitted) >= 6, log[-3000:]
    assert "Group job data" in log and "Group job prep" in log
    assert not re.search(r"^localrule (?!all)", log, re.M), "a job ran outside Slurm"
    for rule in ("pretrain_corpus", "pretrain_train", "report_pretrain", "report_table_2_1"):
        assert f"Rule: {rule})" in log, rule


def test_same_files_as_local_run(slurm_run, ci_run: Path) -> None:
    workdir, seconds, _ = slurm_run
    produced = relative_files(workdir, "results")
    assert produced <= relative_files(ci_run, "results")
    for model in ("target", "target_alt"):
        assert f"results/models/{model}/model.safetensors" in produced
    assert "results/report/pretrain_summary.csv" in produced
    assert not [p for p in produced if ".tmp-" in p]  # no temporary leftovers
    assert seconds < SLURM_RUN_TIMEOUT


DETERMINISTIC = [
    "results/data/*.jsonl",
    "results/pretrain/corpus.jsonl",
    "results/models/tokenizer/tokenizer.json",
    "results/report/thesis_table_2_1.csv",
]


def test_deterministic_outputs_identical(slurm_run, ci_run: Path) -> None:
    workdir, _, _ = slurm_run
    compared = 0
    for pattern in DETERMINISTIC:
        for remote in sorted(workdir.glob(pattern)):
            rel = remote.relative_to(workdir)
            assert remote.read_bytes() == (ci_run / rel).read_bytes(), rel
            compared += 1
    assert compared >= 8  # five pretraining sources, corpus, tokenizer, Table 2.1
    for name in ("train", "val"):
        a = np.load(ci_run / f"results/pretrain/tokens/{name}.npy")
        b = np.load(workdir / f"results/pretrain/tokens/{name}.npy")
        assert np.array_equal(a, b), name


def test_models_and_loss_curves_match(slurm_run, ci_run: Path) -> None:
    """Pretraining is seeded, batches depend only on (seed, step) and the Slurm job gets the
    rule's thread count, so weights and losses come out bit-identical on the same machine."""
    import torch
    from safetensors.torch import load_file

    workdir, _, _ = slurm_run
    for curve in sorted(ci_run.glob("results/pretrain/*/loss.csv")):
        rel = curve.relative_to(ci_run)
        a, b = pd.read_csv(curve), pd.read_csv(workdir / rel)
        measured = [c for c in a.columns if c != "seconds"]  # wall time differs, of course
        pd.testing.assert_frame_equal(a[measured], b[measured], check_exact=True, obj=str(rel))
        model = rel.parent.name
        wa = load_file(ci_run / "results/models" / model / "model.safetensors")
        wb = load_file(workdir / "results/models" / model / "model.safetensors")
        assert wa.keys() == wb.keys()
        assert all(torch.equal(wa[k], wb[k]) for k in wa), model
        threads = [
            json.loads((root / rel.parent / "stats.json").read_text())["provenance"]["threads"]
            for root in (ci_run, workdir)
        ]
        assert threads[0] == threads[1], threads  # the Slurm job got the rule's threads
