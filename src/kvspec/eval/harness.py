"""lm-eval wrapper: evaluate an in-memory model on the study's tasks, return plain metrics.

Each evaluated column (the thesis table's ``wiki``, ``arc``, ``mmlu`` ...) is one `TaskSpec`:
either a local task template from ``config/lm_eval_tasks/`` reading a normalized JSONL file, or
one of lm-eval's own task names (paper scale, hub data). Local templates name their data file
relatively; `local_task` swaps in the absolute path, so an evaluation runs from any working
directory and never touches the hub. Per-task limits are seeded random subsets of documents
(lm-eval's ``samples``), so a limited MMLU still spans its subjects instead of the first one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from kvspec.seeds import derive, python_random


@dataclass(frozen=True)
class TaskSpec:
    """One evaluated column: a local template + data file, or an lm-eval task name."""

    metric: str  # e.g. "acc" or "word_perplexity"
    template: str | None = None  # local YAML stem in the task directory, e.g. "kvspec_arc_easy"
    data: str | None = None  # normalized JSONL the template reads
    lm_eval: str | None = None  # lm-eval's own task (or group) name
    limit: int | None = None  # evaluate a seeded random subset of this many documents
    max_words: int | None = None  # keep only each document's first N words (perplexity tasks)

    def __post_init__(self) -> None:
        if (self.template is None) == (self.lm_eval is None):
            raise ValueError("a task needs exactly one of template (local) or lm_eval (hub)")
        if self.template is not None and self.data is None:
            raise ValueError(f"local task {self.template!r} needs a data file")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {self.limit}")
        if self.max_words is not None and (self.template is None or self.max_words < 1):
            raise ValueError("max_words needs a local task and a value >= 1")


def offline_environment() -> None:
    """Forbid hub access for datasets/models unless the environment already decided.

    Local tasks read JSON files only; setting these when unset keeps a missing file from
    turning into a silent download attempt.
    """
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def first_words(text_field: str, max_words: int):
    """A `process_docs` that cuts each document's `text_field` to its first `max_words` words,
    capping the tokens a perplexity evaluation reads (word counts stay exact)."""

    def cut(doc: dict[str, Any]) -> dict[str, Any]:
        return {text_field: " ".join(doc[text_field].split(" ")[:max_words])}

    return lambda dataset: dataset.map(cut)


def local_task(
    task_dir: str | Path,
    template: str,
    data_file: str | Path,
    max_words: int | None = None,
) -> dict[str, Any]:
    """The task config of `task_dir/<template>.yaml` reading `data_file` (absolute path),
    optionally with every document's `text` cut to `max_words` words."""
    from lm_eval.tasks._yaml_loader import load_yaml

    path = Path(task_dir) / f"{template}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no task template {path}")
    data = Path(data_file).resolve()
    if not data.is_file():
        raise FileNotFoundError(f"task {template!r}: data file {data} does not exist")
    cfg = load_yaml(path, resolve_func=True)
    split = cfg.get("test_split", "test")
    cfg["dataset_kwargs"] = {
        **cfg.get("dataset_kwargs", {}),
        "data_files": {split: str(data)},
    }
    if max_words is not None:
        cfg["process_docs"] = first_words("text", max_words)
    return cfg


def _task_requests(
    specs: Mapping[str, TaskSpec], task_dir: str | Path
) -> dict[str, str | dict[str, Any]]:
    """Column -> what lm-eval should load (inline config for local tasks, else a name)."""
    return {
        col: local_task(task_dir, s.template, s.data, s.max_words) if s.template else s.lm_eval
        for col, s in specs.items()
    }


def _leaf_tasks(loaded: Mapping[str, Any]) -> dict[str, Any]:
    return dict(loaded["tasks"])


def _seeded_samples(tasks: Mapping[str, Any], limit: int | None, seed: int) -> dict[str, list]:
    """Sorted random document indices per leaf task (all documents when `limit` is None)."""
    out = {}
    for name, task in sorted(tasks.items()):
        n = len(task.eval_docs)
        k = n if limit is None else min(limit, n)
        out[name] = sorted(python_random(seed, "lm-eval subset", name).sample(range(n), k))
    return out


def _metric(result: Mapping[str, Any], metric: str, name: str) -> tuple[float, float | None]:
    key = f"{metric},none"
    if key not in result:
        raise KeyError(f"task {name!r} reported no {metric!r} (has {sorted(result)})")
    stderr = result.get(f"{metric}_stderr,none")
    value = float(result[key])
    return value, float(stderr) if isinstance(stderr, int | float) else None


def evaluate(
    model: nn.Module,
    tokenizer: Any,
    specs: Mapping[str, TaskSpec],
    task_dir: str | Path,
    *,
    batch_size: int = 8,
    max_length: int | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> dict[str, dict[str, Any]]:
    """Evaluate `model` on every column of `specs` in one lm-eval run.

    Returns column -> record with ``metric``, ``value`` (accuracy as a fraction, perplexity as
    is), ``stderr``, ``task`` (lm-eval name) and ``n`` (documents evaluated).
    """
    if not specs:
        raise ValueError("no tasks to evaluate")
    builtin = any(s.lm_eval for s in specs.values())
    if not builtin:  # lm-eval's own tasks read hub data (paper scale); local ones never do
        offline_environment()
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from kvspec.eval.scoring import ContinuationLM

    max_length = max_length or int(getattr(tokenizer, "model_max_length", 0) or 0) or None
    if max_length is None or max_length > 10**8:
        raise ValueError("set tokenizer.model_max_length (or pass max_length) before evaluating")
    tokenizer.model_max_length = max_length
    # indexing lm-eval's thousands of built-in YAMLs takes seconds: only when one is needed
    manager = TaskManager(include_path=str(task_dir), include_defaults=builtin)
    requests = _task_requests(specs, task_dir)
    samples: dict[str, list[int]] = {}
    leaves: dict[str, list[str]] = {}
    for col, request in requests.items():
        chosen = _seeded_samples(_leaf_tasks(manager.load([request])), specs[col].limit, seed)
        samples.update(chosen)
        leaves[col] = sorted(chosen)
    lm = ContinuationLM(
        pretrained=model,
        tokenizer=tokenizer,
        backend="causal",
        device=device,
        batch_size=batch_size,
        max_length=max_length,
    )
    out = simple_evaluate(
        model=lm,
        tasks=list(requests.values()),
        task_manager=manager,
        samples=samples,
        log_samples=True,  # per-document scores, for paired comparisons between variants
        bootstrap_iters=1000,
        # lm-eval seeds four generators (numpy's legacy one takes 32 bits); each its own stream
        **{
            f"{lib}_seed": derive(seed, "lm-eval", lib, bits=32)
            for lib in ("random", "numpy_random", "torch_random", "fewshot_random")
        },
    )
    records: dict[str, dict[str, Any]] = {}
    for col, request in requests.items():
        name = request["task"] if isinstance(request, dict) else request
        value, stderr = _metric(out["results"][name], specs[col].metric, name)
        records[col] = {
            "metric": specs[col].metric,
            "value": value,
            "stderr": stderr,
            "task": name,
            "n": sum(len(samples[leaf]) for leaf in leaves[col]),
            "per_doc": per_document(out["samples"], leaves[col], specs[col].metric),
        }
    return records


def per_document(
    logged: Mapping[str, list[Mapping[str, Any]]], leaves: list[str], metric: str
) -> dict[str, float] | None:
    """Each evaluated document's score ("<task>/<doc id>" -> e.g. 0/1 accuracy), so that two
    variants scored on the same documents can be compared pairwise; None for metrics that are
    not per-document numbers (perplexities aggregate (loglikelihood, words) pairs)."""
    scores = {
        f"{leaf}/{sample['doc_id']}": float(sample[metric])
        for leaf in leaves
        for sample in logged.get(leaf, [])
        if isinstance(sample.get(metric), int | float)
    }
    return scores or None
