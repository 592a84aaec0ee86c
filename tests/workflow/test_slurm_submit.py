"""The paper scale as it would be submitted: `snakemake --profile profiles/slurm --configfile
config/paper.yaml` with `sbatch` replaced by a recorder, for one job of every rule.

No GPU cluster is needed: `sbatch` records its arguments and answers with a job id, `squeue`
and `sinfo` answer as an idle cluster would. Every output of the plan's dry run is first made
as an empty stand-in with one common time stamp (so nothing is out of date), then the
outputs of one wave of jobs are removed — one job per rule, none upstream of another in the
wave, so exactly those jobs are ready — and the run is stopped once each was submitted. A few
waves cover every rule. What is checked is what Slurm would be asked for:
the partition of the job's class, GPUs, memory, wall time, nodes and --exclusive for timed jobs.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from kvspec.plan.estimate import dry_run_jobs
from kvspec.plan.resources import TIMED

from ..conftest import REPO, SNAKEMAKE

FAKES = {
    "sbatch": '#!/bin/sh\nprintf "%s\\n" "$*" >> "$KVSPEC_SBATCH_LOG"\n'
              'n=$(wc -l < "$KVSPEC_SBATCH_LOG")\necho "$((1000 + n))"\n',
    "squeue": "#!/bin/sh\nexit 0\n",
    "sinfo": '#!/bin/sh\necho "gpu cpu*"\n',
    "sacct": "#!/bin/sh\nexit 0\n",
    "scontrol": "#!/bin/sh\nexit 0\n",
}  # fmt: skip


def _dry_run(workdir: Path) -> list[dict]:
    proc = subprocess.run([*SNAKEMAKE, "-n", "--snakefile", str(REPO / "Snakefile"),
                           "--directory", str(workdir), "--configfile",
                           str(REPO / "config" / "paper.yaml")],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = [(rule, f) for rule, f in dry_run_jobs(proc.stdout) if "output" in f]
    return [{"rule": rule, "input": f.get("input", "").split(", "),
             "output": f["output"].split(", ")} for rule, f in listed if rule != "all"]  # fmt: skip


def _waves(jobs: list[dict]) -> list[list[dict]]:
    """One job of every rule, in waves of jobs none of which is upstream of another in the
    wave (removing a job's outputs reruns everything downstream of it)."""
    producer = {out: i for i, job in enumerate(jobs) for out in job["output"]}
    parents = [{producer[x] for x in job["input"] if x in producer} for job in jobs]
    up: list[set[int]] = [set() for _ in jobs]
    down: list[set[int]] = [set() for _ in jobs]
    for i in _topological(parents):
        for p in parents[i]:
            up[i] |= up[p] | {p}
    for i, ancestors in enumerate(up):
        for a in ancestors:
            down[a].add(i)
    left, waves = {job["rule"] for job in jobs}, []
    while left:
        wave, blocked = [], set()
        for i, job in enumerate(jobs):
            if job["rule"] in left and i not in blocked:
                wave.append(job)
                left.discard(job["rule"])
                blocked |= up[i] | down[i] | {i}
        waves.append(wave)
    return waves


def _topological(parents: list[set[int]]) -> list[int]:
    order, seen = [], set()

    def visit(i: int) -> None:
        if i not in seen:
            seen.add(i)
            for p in parents[i]:
                visit(p)
            order.append(i)

    for i in range(len(parents)):
        visit(i)
    return order


def _stand_ins(workdir: Path, outputs: list[str]) -> None:
    """An empty file for every output (a directory where another output lies inside it), all
    with one time stamp."""
    parents = {str(Path(p).parent) for p in outputs}
    made = []
    for path in sorted(set(outputs)):
        target = workdir / path
        if path in parents or any(p.startswith(path + "/") for p in parents):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        made.append(target)
    stamp = time.time() - 3600
    for target in made:
        os.utime(target, (stamp, stamp))


def _profile(dest: Path) -> Path:
    """profiles/slurm with the site placeholders filled in."""
    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    for placeholder, value in (("<GPU_PARTITION>", "gpu"), ("<CPU_PARTITION>", "cpu"),
                               ("<ACCOUNT>", "kvspec"), ("<GPU_MODEL>", "h100")):  # fmt: skip
        text = text.replace(placeholder, value)
    profile = yaml.safe_load(text)
    profile.update({"slurm-status-command": "squeue", "slurm-init-seconds-before-status-checks": 1,
                    "retries": 0, "slurm-no-account": True})  # fmt: skip
    profile["default-resources"].pop("slurm_account")
    dest.mkdir(parents=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(profile))
    return dest


@pytest.fixture(scope="module")
def submitted(tmp_path_factory) -> dict[str, str]:
    """rule -> the sbatch command line of its selected job."""
    base = tmp_path_factory.mktemp("submit")
    bin_dir, workdir, log = base / "bin", base / "work", base / "sbatch.log"
    bin_dir.mkdir()
    workdir.mkdir()
    for name, script in FAKES.items():
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    jobs = _dry_run(workdir)
    profile = _profile(base / "profile")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KVSPEC_SBATCH_LOG": str(log),
           "HF_TOKEN": "hf_recorded_only", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    waves = _waves(jobs)
    for n, wave in enumerate(waves):
        _submit_wave(workdir, jobs, wave, profile, env, base / f"snakemake-{n}.log", log)
    lines = log.read_text().splitlines() if log.exists() else []
    out = {}
    for line in lines:
        comment = re.search(r"--comment (\S+)", line)
        rule = shlex.split(comment[1])[0].split("_wildcards")[0] if comment else "?"
        out[rule.removeprefix("rule_")] = line
    expected = {job["rule"] for wave in waves for job in wave}
    assert expected <= set(out), sorted(expected - set(out))
    return out


def _submit_wave(workdir: Path, jobs: list[dict], wave: list[dict], profile: Path, env: dict,
                 trace: Path, log: Path) -> None:  # fmt: skip
    """Run the profile on the wave's outputs until each of its jobs reached `sbatch`."""
    shutil.rmtree(workdir / ".snakemake", ignore_errors=True)  # locks of the killed run
    _stand_ins(workdir, [path for job in jobs for path in job["output"]])
    for job in wave:
        for path in job["output"]:
            target = workdir / path
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    before = len(log.read_text().splitlines()) if log.exists() else 0
    cmd = [*SNAKEMAKE, *[job["output"][0] for job in wave], "--snakefile",
           str(REPO / "Snakefile"), "--directory", str(workdir), "--profile", str(profile),
           "--configfile", str(REPO / "config" / "paper.yaml"),
           "--rerun-triggers", "mtime"]  # fmt: skip
    with open(trace, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and len(log.read_text().splitlines()) - before >= len(wave):
                break
            time.sleep(1)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    submitted = (len(log.read_text().splitlines()) if log.exists() else 0) - before
    assert submitted == len(wave), (submitted, len(wave), trace.read_text()[-3000:])


def test_one_job_of_every_model_rule_was_submitted(submitted) -> None:
    for rule in ("covariance_collect", "evaluate_lmeval", "heal_train", "generate_responses",
                 "specdecode_speed", "moa_train", "moa_bench", "remote_run", "sampling_timing",
                 "convert_mla", "models_fetch", "ngram_index", "pipeline_run",
                 "pipeline_pair"):  # fmt: skip
        assert rule in submitted, rule


def test_gpu_jobs_go_to_the_gpu_partition_with_their_gpus(submitted) -> None:
    for line in submitted.values():
        gpus = re.search(r"--gpus[= ](?:\w+:)?(\d+)", line)
        if gpus:
            assert "-p gpu" in line or "--partition gpu" in line, line
        else:
            assert "-p cpu" in line or "--partition cpu" in line, line
    assert re.search(r"--gpus[= ](?:\w+:)?8", submitted["heal_train"])  # FSDP over a node


def test_memory_time_nodes_and_exclusivity_are_asked_for(submitted) -> None:
    for rule, line in submitted.items():
        assert re.search(r"--mem \d+", line) and re.search(r"-t \d+", line), line
        assert ("--exclusive" in line) == (rule in TIMED), (rule, line)
    assert "--nodes=5" in submitted["pipeline_run"] and "--nodes=5" in submitted["pipeline_pair"]
