"""Document 004 (speculative sampling with draft models, three-model speculative sampling):
which methods run on which models, and its ten figures."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvspec.plan import paths
from kvspec.plan.items import Output, ReportItem, figure_outputs

CATEGORY = "Speculative sampling (document 004)"
HUMANEVAL_SIZE = 164
SHARED = ("prompt_format", "task_ids")  # settings every stage takes
# figure -> (renderer function, what it shows)
FIGURES: dict[int, str] = {
    1: "sweep_acceptance", 2: "sweep_repeats", 3: "sweep_time", 4: "sweep_time_per_token",
    5: "timing_experiment", 6: "passk_experiment", 7: "timing_experiment",
    8: "passk_experiment", 9: "passk_methods", 10: "time_per_token",
}  # fmt: skip


def humaneval_bound(sampling: Mapping[str, Any]) -> int:
    """At most how many problems the HumanEval jobs run of a `sampling` block: `problems`, or
    every problem the pilot tries when it selects them."""
    n = sampling["humaneval"]["problems"]
    return n if n != "pilot" else sampling["pilot"]["problems"] or HUMANEVAL_SIZE


class SamplingPlan:
    """Config block `sampling`: the sweep, HumanEval pass@k per method, timing, MATH-500."""

    def __init__(self, config: Mapping[str, Any], repo: Path) -> None:
        self.config, self.repo = config, repo
        self.sampling = config["sampling"]
        self.target: str = self.sampling["target"]
        self.methods: dict[str, dict[str, Any]] = self.sampling["methods"]
        self.humaneval_methods: list[str] = self.sampling["humaneval"]["methods"]

    def settings(self, stage: str) -> dict[str, Any]:
        """A stage's settings with the block's shared prompt format and HumanEval task ids.
        HumanEval runs one job per method, so its method list is not a job's setting (adding a
        method must not rerun the others), nor are task ids when the pilot chooses its problems."""
        keys = ("prompt_format",) if stage == "humaneval" and self.piloted else SHARED
        shared = {k: self.sampling[k] for k in keys}
        own = {k: v for k, v in self.sampling[stage].items()
               if not (stage == "humaneval" and k == "methods")}  # fmt: skip
        return {**own, **shared}

    def method(self, name: str) -> dict[str, Any]:
        return dict(self.methods[name])

    def models_of(self, names: list[str]) -> dict[str, str]:
        """{model name: directory} of every target the methods verify with and every model
        they draft with (targets first)."""
        used = [self.methods[n].get("target", self.target) for n in names]
        used += [
            self.methods[n][r] for n in names for r in ("draft", "mid") if r in self.methods[n]
        ]
        return {m: paths.MODEL.format(model=m) for m in dict.fromkeys(used)}

    def problems(self, dataset: str = "humaneval") -> str:
        return paths.DATA.format(dataset=dataset)

    # ---- per rule -----------------------------------------------------------------------------
    def sweep_models(self, wildcards: Any = None) -> dict[str, str]:
        return self.models_of([self.sampling["sweep"]["method"]])

    def humaneval_models(self, wildcards: Any) -> dict[str, str]:
        return self.models_of([wildcards.method])

    @property
    def piloted(self) -> bool:
        """HumanEval pass@k runs on the problems the pilot selected (`humaneval.problems:
        pilot`)."""
        return self.sampling["humaneval"]["problems"] == "pilot"

    def pilot_input(self, wildcards: Any = None) -> dict[str, str]:
        """The pilot's result, an input of the HumanEval jobs when they use its selection."""
        return {"pilot": paths.SAMPLING_PILOT} if self.piloted else {}

    def pilot_job(self) -> dict[str, Any]:
        """The pilot's model (the target), its settings and the prompt format."""
        return {"model": paths.MODEL.format(model=self.target),
                "settings": dict(self.sampling["pilot"]),
                "prompt_format": self.sampling["prompt_format"]}  # fmt: skip

    def humaneval_method(self, wildcards: Any) -> dict[str, Any]:
        return self.method(wildcards.method)

    def timing_models(self, wildcards: Any = None) -> dict[str, str]:
        return self.models_of(self.sampling["timing"]["methods"])

    def timing_methods(self, wildcards: Any = None) -> dict[str, dict[str, Any]]:
        return {n: self.method(n) for n in self.sampling["timing"]["methods"]}

    def math500_models(self, wildcards: Any = None) -> dict[str, str]:
        return self.models_of([self.sampling["math500"]["method"]])

    def job(self, kind: str) -> dict[str, Any]:
        """The models, method(s) and settings of the sweep, HumanEval, timing or MATH-500 job
        (HumanEval's per-method entries are functions of the job's {method})."""
        if kind == "humaneval":
            return {"models": self.humaneval_models, "method": self.humaneval_method,
                    "settings": self.settings("humaneval")}  # fmt: skip
        if kind == "timing":
            return {"models": self.timing_models(), "methods": self.timing_methods(),
                    "settings": self.settings("timing")}  # fmt: skip
        method = self.sampling[kind]["method"]
        settings = self.settings("sweep") if kind == "sweep" else self.sampling["math500"]
        return {"models": self.models_of([method]), "method": self.method(method),
                "settings": settings}  # fmt: skip

    # ---- report -------------------------------------------------------------------------------
    def _passk_inputs(self, names: list[str]) -> list[str]:
        return [paths.SAMPLING_HUMANEVAL.format(method=m) for m in names]

    def _figure_inputs(self, number: int) -> tuple[dict[str, list[str]], dict[str, Any]]:
        """Inputs and params (which methods, which experiment) of one figure."""
        s, exps = self.sampling, self.sampling["experiments"]
        if number <= 4:
            return {"result": [paths.SAMPLING_SWEEP]}, {}
        exp = "A" if number in (5, 6) else "B"
        pair = [exps[exp]["classical"], exps[exp]["speculative"]]
        if number in (5, 7):
            timed = [*pair, *exps[exp]["variants"]]
            return {"result": [paths.SAMPLING_TIMING]}, {"experiment": exp, "methods": timed}
        if number in (6, 8):
            names = [*pair, *(s["printed"] if exp == "B" else [])]
            return {"result": self._passk_inputs(names)}, {"experiment": exp, "methods": names}
        if number == 9:
            return {"result": self._passk_inputs(s["figure_9"])}, {"methods": s["figure_9"]}
        return {"result": [paths.SAMPLING_TIMING]}, {"methods": s["figure_10"]}

    def report_items(self) -> list[ReportItem]:
        paper = str(self.repo / paths.PAPER.format(name="specdec_qwen_figures_5_8"))
        items = []
        for number, renderer in FIGURES.items():
            inputs, params = self._figure_inputs(number)
            stem = f"specdec_qwen_figure_{number}"
            outputs = figure_outputs(stem, label=f"Figure {number}")
            outputs["md"] = Output(paths.report(stem, "md"))
            items.append(ReportItem(
                rule=f"report_specdec_qwen_figure_{number}", renderer=f"sampling:{renderer}",
                log=paths.REPORT_LOG.format(name=stem), category=CATEGORY,
                inputs={**inputs, "paper": [paper]}, outputs=outputs,
                params={**params, "figure": number, "target": self.target,
                        "seed": self.config["seed"],
                        "bootstrap": self.sampling["humaneval"]["bootstrap"]},
                document="specdec_qwen",
            ))  # fmt: skip
        items.append(self._math500_item())
        return items

    def _math500_item(self) -> ReportItem:
        stem = "specdec_qwen_math500"
        return ReportItem(
            rule="report_specdec_qwen_math500", renderer="sampling:math500",
            log=paths.REPORT_LOG.format(name=stem), category=CATEGORY,
            inputs={"result": [paths.SAMPLING_MATH500]},
            outputs={"csv": Output(paths.report(stem, "csv"), stem, "MATH-500 accuracy"),
                     "md": Output(paths.report(stem, "md"))},
            params={"target": self.target}, document="specdec_qwen",
        )  # fmt: skip
