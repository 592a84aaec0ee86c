"""The lecture notes' worked examples (document 001), measured on the study's models."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvspec.config import decode_engines
from kvspec.plan import paths
from kvspec.plan.items import ReportItem, figure_outputs, table_outputs

CATEGORY = "Lecture (worked examples)"
# example -> (status-page label, whether it also draws a figure)
EXAMPLES: dict[str, tuple[str, bool]] = {
    "batching": ("latency, throughput and batch size; TTFT vs prompt length", True),
    "roofline": ("arithmetic intensity and roofline", True),
    "kv_cache": ("KV-cache bytes per token (MHA/GQA/MLA/CLA/sliding window)", False),
    "quantization": ("quantisation toy example and 4-bit weights", False),
    "speculative": ("speculative sampling example and exactness", False),
    "scheduling": ("continuous vs static batching", False),
    "paged": ("PagedAttention: fragmentation and copy-on-write", False),
}


class LecturePlan:
    """Config block `lecture`: one rule per worked example, one report item each."""

    def __init__(self, config: Mapping[str, Any], repo: Path, care: Any, spec: Any,
                 evaluate: Any) -> None:  # fmt: skip
        self.config, self.repo = config, repo
        self.lecture = config["lecture"]
        self.model: str = self.lecture["model"]
        self.care, self.spec = care, spec
        self._task, self.evaluate_settings = evaluate.task, evaluate.settings

    def output(self, example: str) -> str:
        return paths.LECTURE.format(example=example)

    def model_dir(self, wildcards: Any = None) -> str:
        return paths.MODEL.format(model=self.model)

    # ---- inputs of the rules ------------------------------------------------------------------
    def kv_models(self, wildcards: Any = None) -> dict[str, str]:
        """{label: directory}: the lecture's model first, then `kv_cache.models`, then the
        timed MLA conversions of the CARE decode-speed benchmark (no conversion of its own)."""
        names = dict.fromkeys([self.model, *self.lecture["kv_cache"]["models"]])
        models = {m: paths.MODEL.format(model=m) for m in names}
        if self.lecture["kv_cache"]["converted"] and self.care and self.care.care["decode_speed"]:
            speed = self.care.decode_speed_models()
            models |= {label: path for label, path in speed.items() if "/convert/" in path}
        return models

    def kv_inputs(self, wildcards: Any = None) -> list[str]:
        """The measured directories, and the base model the conversions read weights from."""
        models = set(self.kv_models().values())
        if any("/convert/" in p for p in models):
            models.add(paths.MODEL.format(model=self.care.main))
        return sorted(models)

    def quantization_tasks(self, wildcards: Any = None) -> dict[str, dict[str, Any]]:
        return {col: self._task(col) for col in self.lecture["quantization"]["columns"]}

    def quantization_inputs(self, wildcards: Any = None) -> dict[str, Any]:
        q = self.lecture["quantization"]
        data = [t["data"] for t in self.quantization_tasks().values() if t["data"]]
        calibration = paths.DATA.format(dataset=q["calibration"])
        return {"model": self.model_dir(), "calibration": calibration, "data": data}

    def calibration_kind(self, wildcards: Any = None) -> str:
        dataset = self.lecture["quantization"]["calibration"]
        return self.config["data"]["datasets"][dataset]["kind"]

    def job(self, example: str) -> dict[str, Any]:
        """What the example's job is told: its settings and seed, plus per example the run's
        device and dtype (and decode engine), the measured models, prompt set or lm-eval tasks."""
        run = {"device": self.config["resources"]["device"],
               "dtype": self.config["resources"]["dtype"]}  # fmt: skip
        decode = {"linear": self.config["resources"]["linear"]}  # the decoding examples' engine
        job = {"settings": self.lecture[example], "seed": self.config["seed"]}
        if example == "kv_cache":
            job |= {"models": self.kv_models(), **run}
        elif example == "quantization":
            job |= {"calib_kind": self.calibration_kind(), "tasks": self.quantization_tasks(),
                    "task_dir": str(self.repo / "config" / "lm_eval_tasks"),
                    # it quantizes the loaded weights: the conversions' dtype, not eval.dtype
                    "eval_settings": self.evaluate_settings() | run}  # fmt: skip
        elif example == "speculative":  # a target and the distilled draft
            job |= {"bench": self.bench(example), **run,
                    **decode_engines(self.config["resources"])}  # fmt: skip
        elif example == "scheduling":
            job |= {"bench": self.bench(example), **run, **decode}
        elif example == "paged":  # the scheduling example's prompts and batches
            job |= {"bench": self.bench("scheduling"), **run, **decode}
        elif example == "batching":
            job |= {**run, **decode}
        return job

    def bench(self, example: str) -> dict[str, Any]:
        """The prompt set (a key of spec.speed.sets) an example reads, with its own count."""
        settings = self.lecture[example]
        return dict(self.spec.bench_set(settings["prompts"]), n=settings["n_prompts"])

    def prompts_file(self, example: str) -> str:
        return self.spec.bench_prompts(self.lecture[example]["prompts"])

    def speculative_inputs(self, wildcards: Any = None) -> dict[str, str]:
        draft = paths.MODEL.format(model=self.lecture["speculative"]["draft"])
        return {
            "target": self.model_dir(),
            "prompts": self.prompts_file("speculative"),
            "draft": draft,
        }

    def scheduling_inputs(self, wildcards: Any = None) -> dict[str, str]:
        return {"model": self.model_dir(), "prompts": self.prompts_file("scheduling")}

    def paged_inputs(self, wildcards: Any = None) -> dict[str, str]:
        return {**self.scheduling_inputs(), "scheduling": self.output("scheduling")}

    # ---- report -------------------------------------------------------------------------------
    def report_items(self) -> list[ReportItem]:
        paper = str(self.repo / paths.PAPER.format(name="lecture_examples"))
        items = []
        for example, (label, figure) in EXAMPLES.items():
            outputs = table_outputs(f"lecture_{example}", label=label)
            if figure:
                fig = figure_outputs(f"lecture_{example}_figure", label=label)
                outputs |= {f"figure_{k}": v for k, v in fig.items()}
            items.append(ReportItem(
                rule=f"report_lecture_{example}", renderer=f"lecture:render_{example}",
                log=paths.REPORT_LOG.format(name=f"lecture_{example}"), category=CATEGORY,
                inputs={"result": [self.output(example)], "paper": [paper]},
                outputs=outputs, params={"model": self.model}, document="lecture",
            ))  # fmt: skip
        return items
