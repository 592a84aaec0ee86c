"""The pipeline rule's stage function: every strategy at every stage count on the same prompts,
launched as real processes on this machine, beside single-process decoding."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tqdm import tqdm

from kvspec.io import Journal, read_json, write_json
from kvspec.pipeline.launch import PipelineRun, RankSignalled, launch_local, launch_srun
from kvspec.provenance import provenance

log = logging.getLogger(__name__)
METRICS = ("new_tokens", "tokens_per_s", "ttft_s", "itl_s", "pipeline_runs", "accept_len",
           "drafted", "accepted", "cancelled", "peak_rss_mb")  # fmt: skip


def runs_stage(
    inputs: Mapping[str, str],
    out: str,
    *,
    sets: Mapping[str, Mapping[str, Any]],
    settings: Mapping[str, Any],
    dtype: str,
    linear: str,
    seed: int,
    threads: int,
    checkpoint: str | None = None,
    draft_linear: str | None = None,
) -> None:
    """The single-process greedy reference of every prompt (transformers' own forward), then,
    in turn, the one-process pipeline engine (`threads` threads; the speed baseline) and each
    strategy at each stage count (`threads_per_rank` each), each launched once for all the
    prompts it has not run yet (the ranks start and load their weights once). Every run's
    tokens are compared with the reference. First, the simulator's costs are measured with a
    rank's threads. The draft decodes in `draft_linear`'s engine (None: `linear`).
    Each finished launch is journalled in `checkpoint`: a killed job keeps its runs (with the
    timings measured before the kill) and runs only the rest."""
    from kvspec.data.records import read_jsonl
    from kvspec.decoding.generate import stop_ids
    from kvspec.decoding.loop import greedy_generate
    from kvspec.decoding.prompts import bench_prompts
    from kvspec.models.load import load_model, use_threads

    target, tok = load_model(inputs["target"], dtype=dtype, linear=linear)
    stops = stop_ids(target, tok)
    prompts = [
        (name, pid, ids)
        for name, bench in sets.items()
        for pid, ids in bench_prompts(read_jsonl(inputs[f"prompts_{name}"]), bench, tok)
    ]
    draft_linear = draft_linear or linear
    cal, raw = _calibrate(inputs, target, prompts, settings, dtype, draft_linear, seed)
    use_threads(threads)
    journal = Journal(checkpoint, key="run_key")
    done, rows = journal.done(), []
    references = [greedy_generate(target, ids, settings["max_new_tokens"], stops)
                  for *_, ids in tqdm(prompts, desc="references", mininterval=5)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kvspec-pipeline-") as tmp:
        for run, strategy, n, variant in tqdm(_schedule(settings), desc="launches", mininterval=5):
            keys = [(name, pid, run, strategy, n, variant) for name, pid, _ in prompts]
            todo = [i for i, key in enumerate(keys) if key not in done]
            if todo:
                spec = _run_spec(
                    inputs,
                    [prompts[i][2] for i in todo],
                    stops,
                    strategy,
                    n,
                    settings,
                    dtype,
                    (linear, draft_linear),
                    threads if n == 1 and strategy == "iterative" else None,
                    variant,
                )
                launched = _launch(spec, Path(tmp), settings)
                new = [_row(prompts[i], references[i], run, spec, launched, j, keys[i])
                       for j, i in enumerate(todo)]  # fmt: skip
                journal.append(new)
                done |= {keys[i]: row for i, row in zip(todo, new, strict=True)}
            for key in keys:
                rows.append(done[key])
                log.info("%s %s run %d: %s%s n=%d %.2f tok/s, exact %s", *key[:4],
                         f" ({variant})" if variant else "", n,
                         done[key]["tokens_per_s"] or 0.0, done[key]["exact"])  # fmt: skip
    write_json(out, {"runs": rows, "settings": dict(settings), "sets": dict(sets),
                     "calibration": vars(cal), "calibration_raw": raw,
                     "provenance": provenance(dict(settings), dtype=dtype)})  # fmt: skip
    journal.finish()


def _calibrate(inputs: Mapping[str, str], target: Any, prompts: list, settings: Mapping[str, Any],
               dtype: str, draft_linear: str, seed: int) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """Simulator costs at a context of the median prompt plus half the new tokens (the draft
    in `draft_linear`'s engine)."""
    import statistics

    from kvspec.models.load import load_model, use_threads
    from kvspec.pipeline.calibrate import calibrate

    use_threads(settings["threads_per_rank"])
    draft, _ = load_model(inputs["draft"], dtype=dtype, linear=draft_linear)
    context = int(statistics.median(len(ids) for *_, ids in prompts))
    context += settings["max_new_tokens"] // 2
    cal, raw = calibrate(target, draft, context=context, repeats=settings["calibration_repeats"],
                         seed=seed)  # fmt: skip
    log.info("calibration: %s", cal)
    return cal, raw


def simulation_stage(runs: str, out: str, *, settings: Mapping[str, Any]) -> None:
    """The simulator validated on the real runs, then swept (Figures 4-8 of document 003)."""
    from kvspec.pipeline import scaling

    record = read_json(runs)
    sim = settings["simulate"]
    seeds, nodes = sim["seeds"], sim["nodes"]
    valid = scaling.validation(record, seeds)
    for row in valid:
        log.info("validation %s n=%d: measured %.2f tok/s, simulated %.2f (%+.0f%%)",
                 row["strategy"], row["n_stages"], row["measured_tokens_per_s"],
                 row["simulated_tokens_per_s"], 100 * row["speed_error"])  # fmt: skip
    abl = sim["ablation"]
    write_json(out, {
        "validation": valid,
        "curves": scaling.curves(record, sim["links"], sim["alphas"], nodes, seeds),
        "ablation": scaling.ablation(record, sim["links"].get(abl["link"]), abl["alphas"],
                                     abl["nodes"], abl["batch"], seeds),
        "measured_ablation": scaling.measured_ablation(record, seeds),
        "memory": scaling.memory(record, nodes),
        "measured_memory": [{"strategy": r["strategy"], "n_stages": r["n_stages"],
                             "peak_rss_mb": r["peak_rss_mb"]} for r in record["runs"]],
        "calibration": record["calibration"], "settings": dict(settings),
        "provenance": provenance(dict(settings)),
    })  # fmt: skip


def _schedule(settings: Mapping[str, Any]) -> list[tuple[int, str, int, str]]:
    """(repeat, strategy, stages, variant): the one-process baseline first, strategies
    interleaved, then PipeInfer's ablations (`settings['ablations']`) at every stage count;
    variant "" is the strategy itself."""
    combos = [("iterative", 1, "")] + [(s, n, "") for n in settings["n_stages"]
                                       for s in settings["strategies"]]  # fmt: skip
    combos += [("pipeinfer", n, a) for n in settings["n_stages"]
               for a in settings["ablations"]]  # fmt: skip
    return [(r, *c) for r in range(settings["runs"]) for c in dict.fromkeys(combos)]


def _run_spec(inputs: Mapping[str, str], prompts: list[list[int]], stops: list[int],
              strategy: str, n: int, settings: Mapping[str, Any], dtype: str,
              engines: tuple[str, str], threads: int | None,
              variant: str = "") -> PipelineRun:  # fmt: skip
    from kvspec.pipeline.scaling import ABLATIONS

    return PipelineRun(
        inputs["target"], strategy, n, [list(p) for p in prompts], settings["max_new_tokens"],
        list(stops),
        draft=inputs["draft"], k=settings["k"], dtype=dtype, linear=engines[0],
        draft_linear=engines[1],
        threads=threads or settings["threads_per_rank"], timeout_s=settings["timeout_s"],
        pipeinfer={**settings["pipeinfer"], **(ABLATIONS[variant] if variant else {})},
    )  # fmt: skip


def _launch(spec: PipelineRun, tmp: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
    """One run; a run whose process died by a signal is started again once (logged, and
    counted in the row's `attempts`); a second signal, or any error the run's own code
    raises, fails the job."""
    try:
        return {**_launch_once(spec, tmp, settings), "attempts": 1}
    except RankSignalled as err:
        log.warning("%s run died by a signal; starting it again: %s", spec.strategy, err)
    return {**_launch_once(spec, tmp, settings), "attempts": 2}


def _launch_once(spec: PipelineRun, tmp: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
    """One run through the configured launcher: torchrun on this machine, or srun (the ranks
    as tasks of a Slurm step, across the nodes of the job's allocation)."""
    out = tmp / "out.json"
    out.unlink(missing_ok=True)
    if settings["launcher"] == "srun":
        launch_srun(spec, tmp / "spec.json", out, tmp / "run.log", settings["srun_args"])
    else:
        launch_local(spec, tmp / "spec.json", out, tmp / "run.log")
    return read_json(out)


def _row(prompt: tuple[str, str, list[int]], reference: list[int], run: int, spec: PipelineRun,
         launched: Mapping[str, Any], index: int, key: tuple) -> dict[str, Any]:  # fmt: skip
    """The row of the launch's `index`-th prompt (the launch's peak memory, link and attempts
    are every one of its prompts')."""
    name, pid, ids = prompt
    result = {**launched, **launched["results"][index]}
    return {"set": name, "prompt": pid, "prompt_tokens": len(ids), "run": run,
            "strategy": spec.strategy, "n_stages": spec.n_stages, "ranks": spec.world_size,
            "threads_per_rank": spec.threads, **{m: result.get(m) for m in METRICS},
            "link": result.get("link"), "attempts": result.get("attempts", 1),
            "exact": result["tokens"] == reference, "variant": key[5],
            "run_key": list(key)}  # fmt: skip
