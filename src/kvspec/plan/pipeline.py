"""Document 003 (PipeInfer): real pipeline-parallel runs of every strategy across processes,
and the simulator calibrated on them for node counts this machine cannot hold."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvspec.plan import paths
from kvspec.plan.items import Output, ReportItem, figure_outputs, table_outputs

CATEGORY = "PipeInfer (document 003)"
# figure -> (renderer, what the simulated figure plots, status-page label)
FIGURES: dict[int, tuple[str, dict[str, Any]]] = {
    4: ("render_simulated_curves", {"metric": "tokens_per_s", "axis": "generation speed (tok/s)"}),
    5: ("render_simulated_curves", {"metric": "ttft_s", "axis": "time to first token (s)"}),
    6: ("render_simulated_curves", {"metric": "itl_s", "axis": "inter-token latency (s)"}),
    7: ("render_simulated_memory", {}),
    8: ("render_simulated_ablation", {}),
}


class PipelinePlan:
    """Config block `pipeline`: one job running every strategy at every stage count on the same
    prompts, side by side; one job simulating the strategies from their calibration."""

    def __init__(self, config: Mapping[str, Any], repo: Path, spec: Any) -> None:
        self.config, self.repo, self.spec = config, repo, spec
        self.pipeline = config["pipeline"]
        self.target: str = self.pipeline["target"]
        self.draft: str = self.pipeline["draft"]

    def output(self, wildcards: Any = None) -> str:
        return paths.PIPELINE_RUNS.format(model=self.target)

    def simulated(self, wildcards: Any = None) -> str:
        return paths.PIPELINE_SIMULATED.format(model=self.target)

    def sets(self, wildcards: Any = None) -> dict[str, dict[str, Any]]:
        """{set: benchmark set (a key of spec.speed.sets) with this stage's own count}."""
        return {name: dict(self.spec.bench_set(name), n=n)
                for name, n in self.pipeline["sets"].items()}  # fmt: skip

    def inputs(self, wildcards: Any = None) -> dict[str, str]:
        prompts = {f"prompts_{n}": self.spec.bench_prompts(n) for n in self.pipeline["sets"]}
        return {"target": paths.MODEL.format(model=self.target),
                "draft": paths.MODEL.format(model=self.draft), **prompts}  # fmt: skip

    def settings(self, wildcards: Any = None) -> dict[str, Any]:
        """What the runs depend on (the simulation's settings are not among them)."""
        skip = ("target", "draft", "sets", "simulate", "figure_9")
        return {k: v for k, v in self.pipeline.items() if k not in skip}

    def pairs(self) -> list[tuple[str, str, str]]:
        """Figure 9's (target, draft, runs file) in the figure's order: the pair of `target` and
        `draft` reads pipeline_run's runs when they hold the figure's stage count; every other
        pair is a pipeline_pair job."""
        figure = self.pipeline["figure_9"]
        if not figure:
            return []
        shared = figure["n_stages"] in self.pipeline["n_stages"]
        out = []
        for pair in figure["pairs"]:
            target, draft = pair["target"], pair["draft"]
            main = shared and (target, draft) == (self.target, self.draft)
            path = self.output() if main else paths.PIPELINE_PAIR.format(model=target, draft=draft)
            out.append((target, draft, path))
        return out

    def pair_inputs(self, wildcards: Any) -> dict[str, str]:
        """A pair's two models and the prompt sets."""
        return {**self.inputs(), "target": paths.MODEL.format(model=wildcards.model),
                "draft": paths.MODEL.format(model=wildcards.draft)}  # fmt: skip

    def pair_settings(self, wildcards: Any = None) -> dict[str, Any]:
        """pipeline_run's settings at Figure 9's one stage count, without the ablations."""
        n_stages = [self.pipeline["figure_9"]["n_stages"]]
        return {**self.settings(), "n_stages": n_stages, "ablations": []}

    def simulate_settings(self, wildcards: Any = None) -> dict[str, Any]:
        return {"simulate": self.pipeline["simulate"]}

    def report_items(self) -> list[ReportItem]:
        runs, sim = [self.output()], [self.simulated()]
        params = {"target": self.target, "draft": self.draft}
        items = [
            self._item("pipeinfer_runs", "render_runs", {"result": runs}, params,
                       table_outputs("pipeinfer_runs",
                                     label="PipeInfer strategies, real multi-process runs")),
            self._item("pipeinfer_simulation_validation", "render_validation",
                       {"result": sim}, params,
                       table_outputs("pipeinfer_simulation_validation",
                                     label="PipeInfer simulator against the real runs")),
            self._item("pipeinfer_figure_10", "render_variance", {"result": runs}, params,
                       _figure("pipeinfer_figure_10", "Figure 10")),
        ]  # fmt: skip
        if self.pairs():
            items.append(self._figure_9())
        for number, (renderer, extra) in FIGURES.items():
            stem = f"pipeinfer_figure_{number}"
            if number == 7:  # its (b) and (c) panels: the constrained link's curves
                extra = {"link": self.pipeline["simulate"]["constrained_link"]}
            # measured at the stage counts that ran (Figure 8: when its ablations ran too)
            extra = extra | {"measured_points": number != 8 or bool(self.pipeline["ablations"])}
            items.append(self._item(stem, renderer, {"result": sim}, params | extra,
                                    _figure(stem, f"Figure {number}")))  # fmt: skip
        for number, roman in enumerate(("I", "II", "III", "IV"), start=1):  # transcribed only
            stem = f"pipeinfer_table_{number}"
            paper = str(self.repo / paths.PAPER.format(name=stem))
            items.append(self._item(stem, "render_paper_only", {"paper": [paper]}, {},
                                    table_outputs(stem, label=f"Table {roman}")))  # fmt: skip
        return items

    def _figure_9(self) -> ReportItem:
        """Figure 9 from the measured runs of every pair at the figure's stage count."""
        pairs = self.pairs()
        n = self.pipeline["figure_9"]["n_stages"]
        params = {"pairs": [{"target": t, "draft": d} for t, d, _ in pairs], "n_stages": n}
        return self._item("pipeinfer_figure_9", "render_pairs",
                          {"result": [path for *_, path in pairs]}, params,
                          _figure("pipeinfer_figure_9", "Figure 9"))  # fmt: skip

    def _item(self, stem: str, renderer: str, inputs: dict[str, list[str]],
              params: dict[str, Any], outputs: dict[str, Output]) -> ReportItem:  # fmt: skip
        module = "tables" if renderer == "render_paper_only" else "pipeline"
        return ReportItem(rule=f"report_{stem}", renderer=f"{module}:{renderer}",
                          log=paths.REPORT_LOG.format(name=stem), category=CATEGORY, inputs=inputs,
                          outputs=outputs, params=params, document="pipeinfer")  # fmt: skip


def _figure(stem: str, label: str) -> dict[str, Output]:
    return figure_outputs(stem, label=label) | {"md": Output(paths.report(stem, "md"))}
