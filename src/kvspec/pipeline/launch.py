"""Run one pipeline-parallel generation across processes.

`python -m kvspec.pipeline.launch SPEC.json OUT.json` is what every rank runs (started by
`torchrun` locally, or by `srun` under Slurm: torch.distributed's env:// rendezvous either
way). A run generates for each of its prompts in turn, every rank's caches emptied between
them, so that the ranks start and load their weights once for all of them; rank 0 writes
OUT.json (per prompt: tokens, TTFT, ITL, speed; per-rank peak memory), atomically, only when
every rank finished every prompt. `launch_local` starts the ranks with torchrun on this machine,
`launch_srun` as the tasks of a Slurm step.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from kvspec.decoding.packed import pack_linears
from kvspec.io import write_json
from kvspec.pipeline import comm
from kvspec.pipeline.pipeinfer import HeadPipeline, PipeInferOptions, Scheduler, pipeinfer_worker
from kvspec.pipeline.stage import Stage, split_layers
from kvspec.pipeline.strategies import (
    STRATEGIES,
    Head,
    Trace,
    ask_drafts,
    iterative,
    spec_worker,
    speculative,
    stage_worker,
)


@dataclass
class PipelineRun:
    """One generation per prompt: the target split over `n_stages` ranks (+ one speculative
    rank), the prompts in turn."""

    target: str  # save_pretrained directory
    strategy: str
    n_stages: int
    prompts: list[list[int]]
    max_new_tokens: int
    stops: list[int] = field(default_factory=list)
    draft: str | None = None  # speculative model directory (speculative, pipeinfer)
    k: int = 4
    dtype: str = "float32"
    linear: str = "torch"  # decode engine (resources.linear)
    draft_linear: str | None = None  # the draft's (resources.draft_linear; None: linear)
    threads: int = 1
    timeout_s: float = 120.0  # a rank waiting longer than this for a peer fails
    kill: tuple[int, int] | None = None  # fault tests: (rank, after n runs of a prompt) SIGKILLs
    pipeinfer: dict[str, Any] = field(default_factory=dict)  # PipeInferOptions fields

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, not {self.strategy!r}")
        if self.speculative and not self.draft:
            raise ValueError(f"the {self.strategy} strategy needs a draft model directory")
        if not self.prompts or not all(self.prompts):
            raise ValueError("a run needs prompts, each of at least one token")
        PipeInferOptions(**self.pipeinfer)  # unknown or out-of-range options fail here

    @property
    def speculative(self) -> bool:
        """Whether a speculative model runs on a rank of its own (the last one)."""
        return self.strategy in ("speculative", "pipeinfer")

    @property
    def world_size(self) -> int:
        return self.n_stages + self.speculative

    @property
    def launch_timeout_s(self) -> float:
        """The launcher's limit for the whole run: `timeout_s` for starting and loading, and
        `timeout_s` more per prompt."""
        return self.timeout_s * (1 + len(self.prompts))


def run_rank(run: PipelineRun, rank: int) -> dict[str, Any] | None:
    """This rank's part of `run` in an initialised process group; rank 0 returns the result."""
    from kvspec.models.load import load_weights

    torch.set_num_threads(run.threads)
    dtype = getattr(torch, run.dtype)
    traces, link = [], None
    if rank < run.n_stages:
        model = load_weights(run.target, dtype=run.dtype)
        layers = split_layers(model.config.num_hidden_layers, run.n_stages)[rank]
        stage = pack_linears(Stage(model, layers, head=rank == 0), run.linear)  # this stage only
        del model  # keep only this stage's weights
        if rank < 2 and run.n_stages > 1:  # the loopback link, for the simulator
            link = comm.measure_link(rank, stage.layers[0].self_attn.o_proj.out_features, dtype)
        die = run.kill[1] if run.kill and run.kill[0] == rank else None
        worker = pipeinfer_worker if run.strategy == "pipeinfer" else stage_worker
        for prompt in run.prompts:  # every strategy ends a prompt with STOP down the pipeline
            stage.reset()
            if rank == 0:
                traces.append(_head(run, stage, prompt))
            else:
                worker(stage, rank, run.n_stages, die)
    else:
        from kvspec.decoding.draft_model import DraftModelDrafter

        engine = run.draft_linear or run.linear
        draft = load_weights(run.draft, dtype=run.dtype, linear=engine)  # readout rebuilt
        for _ in run.prompts:  # a new drafter, and so an empty draft cache, per prompt
            spec_worker(DraftModelDrafter(draft, report_confidence=run.strategy == "pipeinfer"))
    peaks: list[Any] = [None] * run.world_size
    dist.all_gather_object(peaks, _peak_rss_mb())
    if rank != 0:
        return None
    results = [{"tokens": trace.tokens, **trace.metrics()} for trace in traces]
    return {"results": results, "peak_rss_mb": peaks, "link": link}


def _head(run: PipelineRun, stage: Stage, prompt: list[int]) -> Trace:
    if run.strategy == "pipeinfer":
        spec_rank = run.n_stages
        options = PipeInferOptions(**run.pipeinfer)
        scheduler = Scheduler(HeadPipeline(stage, run.n_stages),
                              lambda seq, k: ask_drafts(seq, k, spec_rank), prompt,
                              run.max_new_tokens, run.stops, options)  # fmt: skip
        trace = scheduler.generate()
        comm.send(comm.Message(comm.STOP), spec_rank, tag=comm.TAG_TOKENS)
        return trace
    head = Head(stage, run.n_stages)
    if run.strategy == "iterative":
        return iterative(head, prompt, run.max_new_tokens, run.stops)
    return speculative(head, prompt, run.max_new_tokens, run.stops, run.k, run.n_stages)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size: torchrun's RANK/WORLD_SIZE, or srun's
    SLURM_PROCID/SLURM_NTASKS (exported as RANK/WORLD_SIZE for the env:// rendezvous)."""
    for rank_key, world_key in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_key in os.environ and world_key in os.environ:
            rank, world = os.environ[rank_key], os.environ[world_key]
            os.environ["RANK"], os.environ["WORLD_SIZE"] = rank, world
            return int(rank), int(world)
    raise RuntimeError("no rank: start ranks with torchrun or srun (RANK/WORLD_SIZE or "
                       "SLURM_PROCID/SLURM_NTASKS)")  # fmt: skip


def main(spec_path: str, out_path: str) -> None:
    """Entry point of every rank (env:// rendezvous: MASTER_ADDR/PORT, and the rank and world
    size from torchrun or srun)."""
    run = PipelineRun(**json.loads(Path(spec_path).read_text()))
    rank, world = _rank_and_world()
    if world != run.world_size:
        raise ValueError(f"{run.strategy} over {run.n_stages} stages needs {run.world_size} "
                         f"ranks, got WORLD_SIZE={world}")  # fmt: skip
    dist.init_process_group("gloo", timeout=timedelta(seconds=run.timeout_s))
    try:
        result = run_rank(run, rank)
    except Exception as err:
        raise RuntimeError(f"pipeline rank {rank} of {world} failed: {err}") from err
    finally:
        dist.destroy_process_group()
    if result is not None:
        write_json(out_path, {"run": dataclasses.asdict(run), **result})


def launch_local(run: PipelineRun, spec_path: Path, out_path: Path, log: Path) -> None:
    """Start every rank on this machine with torchrun; raise if any rank fails or time runs
    out (torchrun then stops the others). OUT.json exists only after a complete run."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={run.world_size}", "-m", "kvspec.pipeline.launch",
           str(spec_path), str(out_path)]  # fmt: skip
    _launch(cmd, run, spec_path, log, os.environ.copy(), _root_cause)


def launch_srun(run: PipelineRun, spec_path: Path, out_path: Path, log: Path,
                srun_args: list[str] | tuple[str, ...] = ()) -> None:  # fmt: skip
    """Start every rank as a task of `srun` (inside a Slurm allocation the tasks spread over
    its nodes; outside one, srun allocates): rank 0, the rendezvous, is task 0 on the first
    node, this one. Failures and time-outs as `launch_local`."""
    import socket

    with socket.socket() as probe:  # a free port for the rendezvous on this node
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    env = os.environ.copy() | {"MASTER_ADDR": socket.gethostname(), "MASTER_PORT": str(port)}
    cmd = ["srun", f"--ntasks={run.world_size}", "--kill-on-bad-exit=1",
           f"--cpus-per-task={run.threads}", *srun_args, sys.executable, "-m",
           "kvspec.pipeline.launch", str(spec_path), str(out_path)]  # fmt: skip
    _launch(cmd, run, spec_path, log, env, _srun_cause)


def _launch(cmd: list[str], run: PipelineRun, spec_path: Path, log: Path, env: dict[str, str],
            cause) -> None:  # fmt: skip
    spec_path.write_text(json.dumps(dataclasses.asdict(run)))
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
        try:
            code = proc.wait(timeout=run.launch_timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank it started
            proc.wait()
            raise RuntimeError(f"pipeline run timed out after {run.launch_timeout_s:.0f} s; "
                               f"log {log}") from None  # fmt: skip
    if code != 0:
        text = log.read_text()
        tail = "".join(text.splitlines(keepends=True)[-20:])
        error = RankSignalled if _signalled(code, text) else RuntimeError
        raise error(f"pipeline run failed (exit {code}): {cause(text)}; log {log}:\n{tail}")


class RankSignalled(RuntimeError):
    """A pipeline run ended by a signal to one of its processes (a kill, or an abort inside
    the C++ collective library) rather than by an error the run's own code raised."""


def _signalled(code: int, log_text: str) -> bool:
    """The launcher itself died by a signal, or torchrun's report names a rank that did."""
    report = log_text.rpartition("Root Cause")[2]
    return code < 0 or re.search(r"exitcode\s*:\s*-\d+", report) is not None


def _srun_cause(log_text: str) -> str:
    """The first task srun reports as failed, and how it ended."""
    found = re.search(r"srun: error: \S+: task (\d+): (.+)", log_text)
    if not found:
        return "no task named in srun's report"
    return f"pipeline rank {found.group(1)} failed first ({found.group(2).strip()})"


def _root_cause(log_text: str) -> str:
    """The rank torchrun's failure report names as the first to fail, and how it ended."""
    report = log_text.rpartition("Root Cause")[2]
    found = re.search(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)(?:[^\n]*\((\w+)\))?",
                      report, re.S)  # fmt: skip
    if not found:
        return "no rank named in the launcher's report"
    rank, code, signame = found.groups()
    return (
        f"pipeline rank {rank} failed first (exit code {code}{', ' + signame if signame else ''})"
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
    # The rank's work and output are complete: leave without the interpreter's teardown, where a
    # rank once aborted after writing a complete OUT.json ("terminate called without an active
    # exception", SIGABRT; a test of 2026-12-06), which fails a finished run.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
