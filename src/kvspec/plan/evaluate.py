"""lm-eval runs: which columns each evaluated model gets, and the rules' input functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvspec.config import eval_dtype
from kvspec.plan import paths
from kvspec.plan.care import Columns, Limits
from kvspec.plan.names import Calib, Converted, Evaluated, Factors, Healed, Original, RankPlan


class EvalPlan:
    """Every (model, variant) evaluation some report item reads, with exactly its columns.

    The three evaluate rules differ in their wildcards, so each has its own bound methods
    (`*_tasks`, `*_data`); all of them end in `tasks_for(model, variant)`.
    """

    def __init__(
        self, config: Mapping[str, Any], columns: Columns, limits: Limits | None = None
    ) -> None:
        self.config = config
        self.tasks: dict[str, Any] = config["eval"]["tasks"]
        self.columns = columns
        self.limits = limits or {}  # (model, variant) -> column -> documents (care.decide)

    def evaluated(self, kind: type) -> list[tuple[str, Evaluated]]:
        return sorted((k for k in self.columns if isinstance(k[1], kind)), key=str)

    def tasks_for(self, model: str, variant: Evaluated) -> dict[str, dict[str, Any]]:
        """Column -> TaskSpec fields (kvspec.eval.harness), in eval.tasks order."""
        wanted = self.columns.get((model, variant), set())
        limits = self.limits.get((model, variant), {})
        return {col: self.task(col, limits.get(col)) for col in self.tasks if col in wanted}

    def task(self, col: str, limit: int | None = None) -> dict[str, Any]:
        """TaskSpec fields (kvspec.eval.harness) of one column of eval.tasks; `limit` replaces
        the column's document limit."""
        task = self.tasks[col]
        data = paths.DATA.format(dataset=task["dataset"]) if task["template"] else None
        # this key order is part of the params Snakemake compares: keep it stable
        return {
            "metric": task["metric"],
            "template": task["template"],
            "data": data,
            "lm_eval": task["lm_eval"],
            "limit": limit or task["limit"],
            "max_words": task["max_words"],
        }

    def settings(self) -> dict[str, Any]:
        return {
            "batch_size": self.config["eval"]["batch_size"],
            "max_length": self.config["eval"]["max_length"],
            "seed": self.config["seed"],
            "dtype": eval_dtype(self.config),
            "device": self.config["resources"]["device"],
        }

    @staticmethod
    def _data(tasks: dict[str, dict[str, Any]]) -> list[str]:
        return [t["data"] for t in tasks.values() if t["data"]]

    # ---- per rule: evaluate_original, evaluate_converted, evaluate_healed --------------------
    def original_tasks(self, wildcards: Any) -> dict[str, dict[str, Any]]:
        return self.tasks_for(wildcards.model, Original())

    def original_data(self, wildcards: Any) -> list[str]:
        return self._data(self.original_tasks(wildcards))

    def converted_tasks(self, wildcards: Any) -> dict[str, dict[str, Any]]:
        calib = None if wildcards.calib == "none" else Calib.parse(wildcards.calib)
        variant = Converted(Factors(wildcards.fact, calib), RankPlan.parse(wildcards.plan))
        return self.tasks_for(wildcards.model, variant)

    def converted_data(self, wildcards: Any) -> list[str]:
        return self._data(self.converted_tasks(wildcards))

    def healed_tasks(self, wildcards: Any) -> dict[str, dict[str, Any]]:
        return self.tasks_for(wildcards.model, Healed(wildcards.method, int(wildcards.budget)))

    def healed_data(self, wildcards: Any) -> list[str]:
        return self._data(self.healed_tasks(wildcards))
