"""Faults and bad input, end to end through the `snakemake` command line.

- bad config: the run stops before any job, naming the key or dataset;
- broken data files: the data job fails naming file and line, and leaves no output behind;
- SIGKILL mid-pretraining: nothing plausible is left, the rerun resumes from the checkpoint
  and ends with the same weights and loss curve as an uninterrupted run;
- config edits replan exactly the edited job and what depends on it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ..conftest import REPO, SNAKEMAKE, planned_jobs, shared_mirror, snakemake

pytestmark = pytest.mark.skipif(shared_mirror() is None, reason="offline data mirror not present")


def ci_config() -> dict:
    return yaml.safe_load((REPO / "config" / "ci.yaml").read_text())


def write_config(cfg: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def edit(cfg: dict, dotted: str, value) -> dict:
    """Set `dotted` (a.b.c) in cfg to value; returns cfg."""
    *parents, last = dotted.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    node[last] = value
    return cfg


# --- bad config -------------------------------------------------------------------------------

BAD_CONFIGS = {
    # case: (dotted key, value, text the error must contain)
    "unknown key": ("colour", "blue", "config key 'colour'"),
    "unknown nested key": (
        "models.target.pretrain.train.stpes",
        3,
        "config key 'models.target.pretrain.train.stpes'",
    ),
    "wrong type": ("seed", "zero", "config key 'seed'"),
    "negative rank": ("care.ranks", {"ranks": [-4]}, "config key 'care.ranks.ranks.0'"),
    "rank above g_h*d_h": ("care.ranks", {"ranks": [4, 64]}, "g_h·d_h=32"),
    "Table 3.2 rank above g_h*d_h": (
        "care.alt_ranks",
        {"ranks": [64]},
        "config key 'care.alt_ranks': ranks [64] must lie in [1, g_h·d_h=32]",
    ),
    "fraction above 1": ("care.ranks", {"fractions": [1.5]}, "config key 'care.ranks.fractions.0'"),
    "unknown CARE method": ("care.methods", ["care-magic"], "config key 'care.methods.0'"),
    "unknown decoding method": (
        "spec.speed.runs.target_alt.methods",
        ["greedy", "sd_telepathy"],
        "config key 'spec.speed.runs.target_alt.methods.1'",
    ),
    "undeclared pretraining dataset": (
        "pretrain.sources",
        ["c4", "nowhere"],
        "config key 'pretrain.sources': unknown dataset 'nowhere'",
    ),
    "undeclared calibration dataset": (
        "care.calibration.sets.c4",
        "c5",
        "config key 'care.calibration.sets.c4': unknown dataset 'c5'",
    ),
    "dataset absent from mirror, no hub": (
        "data.datasets.c4",
        {"kind": "text", "adapter": "text", "mirror": ["c4_validation_2k/gone.parquet"]},
        "config key 'data.datasets.c4': dataset 'c4': ['c4_validation_2k/gone.parquet'] not found",
    ),
}


@pytest.mark.parametrize("case", BAD_CONFIGS, ids=lambda c: c.replace(" ", "_"))
def test_bad_config_stops_before_any_job(case: str, tmp_path: Path) -> None:
    key, value, message = BAD_CONFIGS[case]
    bad = write_config(edit(ci_config(), key, value), tmp_path / "bad.yaml")
    proc = snakemake(tmp_path, "-n", "--configfile", str(bad), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert message in out, out[-2000:]
    assert "Job stats" not in out and "rule data_normalize" not in out  # nothing planned
    assert not (tmp_path / "results").exists()


def test_missing_mirror_directory_stops_before_any_job(tmp_path: Path) -> None:
    absent = tmp_path / "no-such-mirror"
    proc = snakemake(tmp_path, "-n", "--config", f"data={{'mirror': '{absent}'}}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"config key 'data.mirror': directory '{absent}' does not exist" in out, out[-2000:]
    assert "Job stats" not in out


# --- broken data files ------------------------------------------------------------------------

ARC = "arc_challenge/arc_challenge.jsonl"


def mirror_with(tmp_path: Path, relative: str, content: str) -> Path:
    """A mirror dir linking every entry of the shared mirror, with `relative` replaced."""
    src, mirror = shared_mirror(), tmp_path / "mirror"
    mirror.mkdir()
    broken_dir = relative.split("/")[0]
    for entry in src.iterdir():
        if entry.name != broken_dir:
            (mirror / entry.name).symlink_to(entry)
    (mirror / relative).parent.mkdir(parents=True)
    (mirror / relative).write_text(content)
    return mirror


def arc_lines(n: int) -> list[str]:
    with open(shared_mirror() / ARC) as fh:
        return [next(fh) for _ in range(n)]


def broken_files() -> dict[str, tuple[str, str]]:
    """case: (file content, text the error must contain)."""
    lines = arc_lines(5)
    truncated = "".join(lines[:4]) + lines[4][: len(lines[4]) // 2] + "\n"
    renamed = lines[2].replace('"gold":', '"label":')
    wrong_fields = "".join(lines[:2]) + renamed + "".join(lines[3:])
    return {
        "empty file": ("", f"{ARC}: file is empty"),
        "truncated line": (truncated, f"{ARC}:5: malformed JSON"),
        "wrong fields": (wrong_fields, f"{ARC}:3: dataset 'arc_challenge'"),
    }


@pytest.mark.parametrize("case", ["empty file", "truncated line", "wrong fields"])
def test_broken_data_file_names_file_and_line(case: str, tmp_path: Path) -> None:
    content, message = broken_files()[case]
    mirror = mirror_with(tmp_path, ARC, content)
    work = tmp_path / "work"
    work.mkdir()
    target = "results/data/arc_challenge.jsonl"
    proc = snakemake(work, target, "--config", f"data={{'mirror': '{mirror}'}}", check=False)
    assert proc.returncode != 0, proc.stdout[-2000:]
    log = (work / "logs" / "data" / "arc_challenge.log").read_text()
    assert message in log, log[-2000:]
    leftovers = (
        [p.name for p in (work / "results").rglob("*")] if (work / "results").exists() else []
    )
    assert leftovers in ([], ["data"]), leftovers  # no output, complete or temporary


# --- interruption -----------------------------------------------------------------------------

INTERRUPT_TRAIN = {  # the ci target's size, trained longer so that a kill can land mid-run
    "steps": 60,
    "batch_size": 4,
    "seq_len": 64,
    "lr": 0.003,
    "warmup_steps": 5,
    "eval_every": 10,
    "eval_batches": 2,
    "ckpt_every": 10,
}
# Inputs of pretrain_train, copied from the session's ci run (with Snakemake's metadata).
UPSTREAM = [
    "results/data",
    "results/pretrain/corpus.jsonl",
    "results/pretrain/tokens",
    "results/models/tokenizer",
    ".snakemake/metadata",
]
MODEL_OUT = ["results/models/target", "results/pretrain/target/loss.csv"]


def start_snakemake(workdir: Path, config: Path, log: Path) -> subprocess.Popen:
    cmd = [
        *SNAKEMAKE,
        *MODEL_OUT,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        "2",
        "--configfile",
        str(config),
        "--config",
        f"data={{'mirror': '{shared_mirror()}'}}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.Popen(
        cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"snakemake ended ({proc.returncode}) before {path} appeared")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            raise AssertionError(f"{path} did not appear within {timeout}s")
        time.sleep(0.05)


def copy_upstream(ci_run: Path, dest: Path) -> Path:
    for rel in UPSTREAM:
        src, dst = ci_run / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
    return dest


@pytest.fixture(scope="module")
def interruption(ci_run: Path, tmp_path_factory) -> dict[str, Path]:
    """The target model trained twice on copies of the ci run's inputs: once straight
    through, once SIGKILLed after its first checkpoint and rerun."""
    base = tmp_path_factory.mktemp("interrupt")
    cfg = ci_config()
    cfg["models"]["target"]["pretrain"]["train"] = INTERRUPT_TRAIN
    config = write_config(cfg, base / "config.yaml")
    straight = copy_upstream(ci_run, base / "straight")
    killed = copy_upstream(ci_run, base / "killed")
    plan = planned_jobs(snakemake(killed, "-n", *MODEL_OUT, "--configfile", str(config)))
    assert plan == {"pretrain_train": 1}, plan  # the copied inputs count as up to date

    proc = start_snakemake(killed, config, base / "killed-1.log")
    ckpt = killed / "resources" / "checkpoints" / "pretrain" / "target.pt"
    wait_for(ckpt, proc, timeout=300)
    os.killpg(proc.pid, signal.SIGKILL)  # snakemake and the training script, like a node crash
    proc.wait(timeout=30)
    results = (killed / "results").rglob("*")
    after_kill = sorted(str(p.relative_to(killed)) for p in results if p.is_file())

    snakemake(killed, "--unlock", "--configfile", str(config))  # SIGKILL leaves the lock
    t0 = time.monotonic()
    snakemake(killed, *MODEL_OUT, "--configfile", str(config))
    resume_seconds = time.monotonic() - t0
    t0 = time.monotonic()
    snakemake(straight, *MODEL_OUT, "--configfile", str(config))
    straight_seconds = time.monotonic() - t0
    print(f"interruption: rerun {resume_seconds:.0f} s, uninterrupted {straight_seconds:.0f} s")
    return {"straight": straight, "killed": killed, "after_kill": after_kill}


def test_kill_leaves_no_plausible_output(interruption) -> None:
    after = interruption["after_kill"]
    assert "results/pretrain/tokens/train.npy" in after  # upstream outputs stay
    partial = ("results/models/target", "results/pretrain/target/")  # .tmp-* would be fine
    assert not [p for p in after if p.startswith(partial)], after


def test_rerun_resumes_from_the_checkpoint(interruption) -> None:
    log = (interruption["killed"] / "logs" / "pretrain" / "target.log").read_text()
    assert "resumed from" in log and "at step" in log, log[-2000:]
    ckpt = interruption["killed"] / "resources" / "checkpoints" / "pretrain" / "target.pt"
    assert not ckpt.exists()  # removed once the model is saved


def test_resumed_run_equals_uninterrupted_run(interruption) -> None:
    import torch
    from safetensors.torch import load_file

    a, b = interruption["straight"], interruption["killed"]
    curves = [pd.read_csv(d / "results/pretrain/target/loss.csv") for d in (a, b)]
    measured = [c for c in curves[0].columns if c != "seconds"]
    assert len(curves[0]) == INTERRUPT_TRAIN["steps"] // INTERRUPT_TRAIN["eval_every"]
    pd.testing.assert_frame_equal(curves[0][measured], curves[1][measured], check_exact=True)
    wa, wb = (load_file(d / "results/models/target/model.safetensors") for d in (a, b))
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# --- change tracking --------------------------------------------------------------------------


def replanned_by_edit(ci_run: Path, tmp_path: Path, key: str, value) -> dict[str, int]:
    edited = write_config(edit(ci_config(), key, value), tmp_path / "edited.yaml")
    return planned_jobs(snakemake(ci_run, "-n", "--configfile", str(edited)))


def replanned_by_forcing(ci_run: Path, output: str) -> dict[str, int]:
    """Jobs planned when one output is forced: that job plus everything downstream of it."""
    return planned_jobs(snakemake(ci_run, "-n", "--forcerun", output))


def test_dataset_limit_edit_replans_that_dataset_and_downstream(ci_run, tmp_path) -> None:
    jobs = replanned_by_edit(ci_run, tmp_path, "data.datasets.arc_challenge.limit", 30)
    assert jobs.get("data_normalize") == 1
    assert "pretrain_train" not in jobs and "pretrain_corpus" not in jobs
    assert jobs == replanned_by_forcing(ci_run, "results/data/arc_challenge.jsonl")


def test_learning_rate_edit_replans_one_model_and_downstream(ci_run, tmp_path) -> None:
    jobs = replanned_by_edit(ci_run, tmp_path, "models.target.pretrain.train.lr", 0.002)
    assert jobs.get("pretrain_train") == 1
    assert "data_normalize" not in jobs and "pretrain_tokenizer" not in jobs
    assert jobs == replanned_by_forcing(ci_run, "results/pretrain/target/stats.json")


def test_note_edit_replans_only_the_sources_table(ci_run, tmp_path) -> None:
    jobs = replanned_by_edit(ci_run, tmp_path, "data.datasets.c4.note", "edited note")
    assert jobs == {"data_sources": 1, "all": 1}


def test_a_gated_model_without_a_token_stops_the_run_before_any_job(tmp_path) -> None:
    """The paper scale downloads Meta's gated Llama models: without HF_TOKEN the run stops
    before its first job, naming the models and the variable (a dry run still plans)."""
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    cmd = [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
           "--cores", "1", "--configfile", str(REPO / "config" / "paper.yaml")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "models.target (meta-llama/Llama-3.1-8B-Instruct)" in text and "HF_TOKEN" in text
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()
    dry = subprocess.run([*cmd, "-n"], capture_output=True, text=True, env=env, timeout=600)
    assert dry.returncode == 0, dry.stderr[-2000:]
