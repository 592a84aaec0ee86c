"""Real multi-process runs (torchrun, gloo): every strategy's greedy output equals single-process
greedy decoding for 2 and 3 target ranks; a killed rank ends the run with an error naming it,
and the rule's launch step starts a run killed by a signal once more."""

from __future__ import annotations

import pytest

from kvspec.decoding.loop import greedy_generate
from kvspec.pipeline.launch import PipelineRun, RankSignalled, launch_local
from tests.pipeline.test_stage import tiny_llama

PROMPT, NEW = [5, 9, 2, 33, 7, 7, 41, 3], 14
PROMPT_2 = [12, 40, 9, 5]


def _launch(tmp_path, run: PipelineRun) -> dict:
    """Through the rule's own launch step (torchrun; a run killed by a signal started again)."""
    from kvspec.pipeline import stages

    return stages._launch(run, tmp_path, {"launcher": "torchrun", "srun_args": []})


@pytest.mark.parametrize(
    ("strategy", "n_stages", "draft"),
    [("iterative", 2, None), ("iterative", 3, None), ("speculative", 2, "target"),
     ("speculative", 3, "draft"), ("pipeinfer", 2, "target"), ("pipeinfer", 3, "draft")],
)  # fmt: skip
def test_pipeline_equals_single_process_greedy(models, tmp_path, strategy, n_stages, draft):
    """One launch, three prompts in turn (the second one shorter, the third the first again):
    each equals its own single-process greedy output, so no cache carries over."""
    prompts = [PROMPT, PROMPT_2, PROMPT]
    run = PipelineRun(models["target"], strategy, n_stages, prompts, NEW,
                      draft=models[draft] if draft else None, k=3, dtype="float64",
                      pipeinfer={"cutoff": 0.0, "recovery": 0.0})  # fmt: skip
    launched = _launch(tmp_path, run)
    assert len(launched["peak_rss_mb"]) == run.world_size and len(launched["results"]) == 3
    for prompt, result in zip(prompts, launched["results"], strict=True):
        assert result["tokens"] == greedy_generate(tiny_llama(0, 5), prompt, NEW)
        assert result["new_tokens"] == NEW and result["ttft_s"] > 0 and result["itl_s"] > 0
        if strategy == "iterative":
            assert result["pipeline_runs"] == NEW
        elif strategy == "pipeinfer":  # how much it speculates depends on timing; never wrong
            assert result["accepted"] <= result["drafted"]
            if draft == "target":  # never rejected; runs still in flight at the end are dropped
                assert result["cancelled"] == 0
        elif draft == "target":  # drafting with the target itself: every draft passes
            assert result["pipeline_runs"] == 4 and result["accepted"] == 3 + 3 + 3 + 1
        else:  # a different random model: drafts mostly rejected, output still greedy's
            assert result["drafted"] > 0 and result["pipeline_runs"] <= NEW


@pytest.mark.parametrize("switch", [{"cancellation": False}, {"continuous": False, "batch": 5}])
def test_pipeinfer_ablations_equal_single_process_greedy(models, tmp_path, switch) -> None:
    """Figure 8's engine switches, through the launcher the pipeline rule uses."""
    options = {"cutoff": 0.0, "recovery": 0.0, **switch}
    run = PipelineRun(models["target"], "pipeinfer", 3, [PROMPT], NEW, draft=models["draft"],
                      dtype="float64", pipeinfer=options)  # fmt: skip
    result = _launch(tmp_path, run)["results"][0]
    assert result["tokens"] == greedy_generate(tiny_llama(0, 5), PROMPT, NEW)
    if "cancellation" in switch:  # invalid runs travel the whole pipeline, none cancelled
        assert result["cancelled"] == 0


@pytest.mark.parametrize("strategy", ["iterative", "pipeinfer"])
def test_a_killed_rank_fails_the_run_naming_it(models, tmp_path, strategy) -> None:
    run = PipelineRun(models["target"], strategy, 3, [PROMPT], NEW, dtype="float64",
                      timeout_s=60, kill=(2, 4), draft=models["draft"])  # fmt: skip
    out = tmp_path / "out.json"
    with pytest.raises(RuntimeError, match="pipeline run failed") as err:
        launch_local(run, tmp_path / "spec.json", out, tmp_path / "run.log")
    assert "pipeline rank 2 failed first (exit code -9, SIGKILL)" in str(err.value)
    assert isinstance(err.value, RankSignalled)  # a signal: the rule starts it once more
    assert not out.exists()


def test_a_run_killed_by_a_signal_is_started_again_once(models, tmp_path, monkeypatch) -> None:
    """Through the rule's own launch step: a signal once costs a second attempt (in the row);
    the same signal twice fails the job; an error of the run's own code is not retried."""
    from kvspec.pipeline import stages

    settings = {"launcher": "torchrun", "srun_args": []}
    run = PipelineRun(models["target"], "iterative", 2, [PROMPT], NEW, dtype="float64",
                      timeout_s=60, kill=(1, 3))  # fmt: skip
    with pytest.raises(RankSignalled):  # killed at the same step both times
        stages._launch(run, tmp_path, settings)
    calls = []

    def flaky(spec, spec_path, out, log) -> None:
        calls.append(spec)
        if len(calls) == 1:
            raise RankSignalled("pipeline run failed (exit 1): rank 0 SIGABRT")
        launch_local(spec, spec_path, out, log)

    monkeypatch.setattr(stages, "launch_local", flaky)
    fine = PipelineRun(models["target"], "iterative", 2, [PROMPT], NEW, dtype="float64")
    result = stages._launch(fine, tmp_path, settings)
    assert result["attempts"] == 2 and len(calls) == 2
    assert result["results"][0]["tokens"] == greedy_generate(tiny_llama(0, 5), PROMPT, NEW)

    def broken(spec, spec_path, out, log) -> None:
        calls.append(spec)
        raise RuntimeError("pipeline run failed (exit 1): a Python error")

    monkeypatch.setattr(stages, "launch_local", broken)
    with pytest.raises(RuntimeError, match="a Python error"):
        stages._launch(fine, tmp_path, settings)
    assert len(calls) == 3  # not retried


def test_bad_runs_are_refused(models) -> None:
    with pytest.raises(ValueError, match="strategy must be one of"):
        PipelineRun(models["target"], "telepathy", 2, [PROMPT], NEW)
    with pytest.raises(ValueError, match="needs a draft model"):
        PipelineRun(models["target"], "speculative", 2, [PROMPT], NEW)
    with pytest.raises(ValueError, match="the pipeinfer strategy needs a draft model"):
        PipelineRun(models["target"], "pipeinfer", 2, [PROMPT], NEW)
    with pytest.raises(TypeError, match="confidence"):
        PipelineRun(models["target"], "pipeinfer", 2, [PROMPT], NEW, draft=models["draft"],
                    pipeinfer={"confidence": 0.5})  # fmt: skip
    for prompts in ([], [[]], [PROMPT, []]):
        with pytest.raises(ValueError, match="at least one token"):
            PipelineRun(models["target"], "iterative", 2, prompts, NEW)


def test_the_launcher_limit_grows_with_the_prompts(models, tmp_path) -> None:
    """The whole run may take `timeout_s` per prompt beyond the first `timeout_s`; a run past
    that limit is killed with every process it started."""
    import time

    from kvspec.pipeline.launch import _launch as launch_cmd

    one = PipelineRun(models["target"], "iterative", 2, [PROMPT], NEW, timeout_s=0.5)
    three = PipelineRun(models["target"], "iterative", 2, [PROMPT] * 3, NEW, timeout_s=0.5)
    assert (one.launch_timeout_s, three.launch_timeout_s) == (1.0, 2.0)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="timed out after 2 s"):
        launch_cmd(["sleep", "30"], three, tmp_path / "spec.json", tmp_path / "run.log", {},
                   lambda text: "")  # fmt: skip
    assert 2.0 <= time.perf_counter() - start < 10
