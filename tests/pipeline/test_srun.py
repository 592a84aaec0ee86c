"""Pipeline ranks as the tasks of a Slurm step (`launch_srun`) on a real single-node Slurm: the
same greedy tokens as single-process decoding, and a killed task named in the error."""

from __future__ import annotations

import json

import pytest

from kvspec.decoding.loop import greedy_generate
from kvspec.pipeline.launch import PipelineRun, launch_srun
from tests.local_slurm import LocalSlurm, SlurmUnavailable, missing_requirements
from tests.pipeline.test_launch import NEW, PROMPT
from tests.pipeline.test_stage import tiny_llama

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(missing_requirements() is not None, reason=str(missing_requirements())),
]
SRUN = ["--overcommit"]  # more ranks than the node's 2 cores


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        with LocalSlurm(tmp_path_factory.mktemp("slurm")) as running:
            yield running
    except SlurmUnavailable as err:
        pytest.skip(str(err))


@pytest.mark.parametrize(("strategy", "n_stages"), [("iterative", 2), ("pipeinfer", 2)])
def test_srun_tasks_equal_single_process_greedy(cluster, models, tmp_path, strategy, n_stages):
    run = PipelineRun(models["target"], strategy, n_stages, [PROMPT], NEW, draft=models["draft"],
                      dtype="float64", timeout_s=120, pipeinfer={"cutoff": 0.0})  # fmt: skip
    out = tmp_path / "out.json"
    launch_srun(run, tmp_path / "spec.json", out, tmp_path / "run.log", SRUN)
    result = json.loads(out.read_text())
    assert result["results"][0]["tokens"] == greedy_generate(tiny_llama(0, 5), PROMPT, NEW)
    assert len(result["peak_rss_mb"]) == run.world_size


def test_a_killed_task_is_named(cluster, models, tmp_path) -> None:
    run = PipelineRun(models["target"], "iterative", 3, [PROMPT], NEW, dtype="float64",
                      timeout_s=60, kill=(2, 4))  # fmt: skip
    out = tmp_path / "out.json"
    with pytest.raises(RuntimeError, match="pipeline run failed") as err:
        launch_srun(run, tmp_path / "spec.json", out, tmp_path / "run.log", SRUN)
    assert "pipeline rank 2 failed first" in str(err.value) and not out.exists()
