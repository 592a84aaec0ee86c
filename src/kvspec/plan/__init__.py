"""The experiment plan: which jobs, variants, evaluations and report rows exist.

`Plan(config)` is built once from the validated config (`kvspec.config.validate`), without
Snakemake, so every decision here is unit-tested (`tests/plan/`). The rule files reference its
parts (`PLAN.care`, `PLAN.spec`, ...) and their bound methods as input functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvspec.plan import paths
from kvspec.plan.base import BasePlan
from kvspec.plan.care import CarePlan, Columns
from kvspec.plan.evaluate import EvalPlan
from kvspec.plan.heal import HealPlan
from kvspec.plan.items import ReportItem
from kvspec.plan.lecture import LecturePlan
from kvspec.plan.moa import MoAPlan
from kvspec.plan.pipeline import PipelinePlan
from kvspec.plan.remote import RemotePlan
from kvspec.plan.sampling import SamplingPlan
from kvspec.plan.spec import SpecPlan

REPO = Path(__file__).resolve().parents[3]


class Plan:
    """Every part of the study the config asks for; absent parts are None."""

    def __init__(self, config: Mapping[str, Any], repo: Path = REPO) -> None:
        self.config = config
        self.base = BasePlan(config, repo)
        self.care = CarePlan(config, repo) if config.get("care") else None
        heal = self.care and config["care"].get("heal")
        self.heal = HealPlan(config, self.care) if heal else None
        self.spec = SpecPlan(config, repo) if config.get("spec") else None
        self.evaluate = EvalPlan(config, self._columns(), self.care and self.care.decided())
        self.lecture = (
            LecturePlan(config, repo, self.care, self.spec, self.evaluate)
            if config.get("lecture")
            else None
        )
        self.sampling = SamplingPlan(config, repo) if config.get("sampling") else None
        self.pipeline = PipelinePlan(config, repo, self.spec) if config.get("pipeline") else None
        self.moa = MoAPlan(config, repo, self.spec) if config.get("moa") else None
        self.remote = RemotePlan(config, repo, self.moa) if config.get("remote") else None
        parts = (self.base, self.care, self.heal, self.spec, self.sampling, self.lecture,
                 self.pipeline, self.moa, self.remote)  # fmt: skip
        self._items = [item for part in parts if part for item in part.report_items()]
        self._items.append(self._status_item(repo))

    def _status_item(self, repo: Path) -> ReportItem:
        """The reproduction status of every numbered table and figure (computed here)."""
        from kvspec.plan.items import Output, table_outputs
        from kvspec.plan.status import status_rows

        return ReportItem(
            rule="report_status",
            renderer="status:render",
            log=paths.REPORT_LOG.format(name="status"),
            category="Reproduction status",
            inputs={},
            # status.rst is the table the report's front page includes (workflow.rst)
            outputs=table_outputs("status", label="Reproduction status")
            | {"rst": Output(paths.report("status", "rst"))},
            params={"rows": status_rows(self, repo / "config" / "paper_results")},
            document="status",
        )

    def _columns(self) -> Columns:
        cols: Columns = {}
        for part in (self.care, self.heal):
            for key, columns in (part.evaluations() if part else {}).items():
                cols.setdefault(key, set()).update(columns)
        return cols

    def decode_speed_inputs(self) -> list[str]:
        """The decode-speed job's model directories, and the calibration statistics of the
        restoration it rebuilds (`HealPlan.decode_speed_restoration`)."""
        restored = self.heal.decode_speed_restoration() if self.heal else None
        models = list(self.care.decode_speed_models().values()) if self.care else []
        return models + ([restored["source"], restored["stats"]] if restored else [])

    def resources(self, rule: str) -> dict[str, Any]:
        """`rule`'s resources from the resource model (kvspec.plan.resources)."""
        from kvspec.plan.resources import resources_of

        return resources_of(self.config, rule)

    def task_dir(self) -> str:
        """The directory of the offline lm-eval task YAMLs."""
        return str(self.base.repo / "config" / "lm_eval_tasks")

    def params(self, rule: str) -> Any:
        """The `job` params of `rule` (kvspec.plan.params): a function of its wildcards."""
        from kvspec.plan.params import job_params

        return job_params(self, rule)

    def report_items(self) -> list[ReportItem]:
        """Every report item, in DAG order (data, models, CARE, healing, speculation, sampling,
        lecture, pipeline, MoA, client-server)."""
        return list(self._items)

    def report_item(self, rule: str) -> ReportItem:
        return next(i for i in self.report_items() if i.rule == rule)

    def documents(self) -> list[str]:
        """The source documents with report items at this scale (each is a target rule)."""
        return sorted({item.document for item in self._items})

    def targets(self, document: str | None = None) -> list[str]:
        """Every final product (datasets, models, report outputs), or one document's items."""
        from kvspec.plan import paths

        items = [i for i in self._items if document in (None, i.document)]
        if document is not None:
            return [f for item in items for f in item.output_files()]
        return [
            *(paths.DATA.format(dataset=d) for d in self.base.datasets),
            *(paths.MODEL.format(model=m) for m in self.base.models),
            *(f for item in items for f in item.output_files()),
        ]
