"""Healing (thesis Table 3.3): restored and SVD students, token budgets, their evaluations."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from kvspec.config import kv_width
from kvspec.plan import paths
from kvspec.plan.care import CARE_CATEGORY, CarePlan, Columns
from kvspec.plan.items import ReportItem, figure_outputs, table_outputs
from kvspec.plan.names import Calib, Converted, Factors, Healed, Original, RankPlan


class HealPlan:
    """The healing part of the plan (a sub-block of `care`)."""

    def __init__(self, config: Mapping[str, Any], care: CarePlan) -> None:
        self.config, self.care = config, care
        self.heal = config["care"]["heal"]
        self.model: str = self.heal["model"]
        self.methods: list[str] = self.heal["methods"]
        self.budgets: list[int] = self.heal["train"]["budgets"]

    def rank(self) -> int:
        """Table 3.3's MLA rank r (cache 2·r per token and layer for every method)."""
        if self.heal["rank"]:
            return self.heal["rank"]
        width = kv_width(self.config, self.model)  # known: kvspec.config checked it
        return max(1, round(self.heal["rank_fraction"] * width))

    def calib(self, method: str) -> Calib:
        """The calibration statistics a restoration (or its report row) uses."""
        return Calib(self.heal["calibration"][method], self.heal["n_samples"], self.heal["seq_len"])

    def svd_student(self) -> Converted:
        return Converted(Factors("svd", None), RankPlan("uniform", self.rank()))

    def restored(self) -> list[str]:
        return [m for m in self.methods if m != "svd"]

    def schedule(self, wildcards: Any) -> str:
        """Latent ranks of a restoration: water-filled across layers, or one for all."""
        return "waterfill" if wildcards.method in self.heal["waterfill"] else "uniform"

    def restore_settings(self, method: str) -> dict[str, Any]:
        """The restoration of `method` (`kvspec.care.heal_stages.restoration`'s settings)."""
        heal = self.heal
        return {"method": method, "rank": self.rank(), "freqfold": heal["freqfold"],
                "cache": heal["cache"], "rope_width": heal["rope_dim"],
                "schedule": self.schedule(SimpleNamespace(method=method)),
                "shrinkage": heal["shrinkage"], "rank_bounds": heal["rank_bounds"]}  # fmt: skip

    def decode_speed_restoration(self) -> dict[str, Any] | None:
        """What the decode-speed job restores and times last (`decode_speed_stage`'s
        `restored`), the same model heal_restore saves for healing; None: nothing."""
        method = self.care.decode_speed_restored() if self.care.decode_speed else None
        if method is None:
            return None
        return {"label": f"{method} restored (DeepSeek-V3, Table 3.3 rank)",
                "source": paths.MODEL.format(model=self.model),
                "stats": self.restore_stats(SimpleNamespace(model=self.model, method=method)),
                "settings": self.restore_settings(method),
                "opts": self.config["care"]["factorize"]}  # fmt: skip

    def ablation(self) -> dict[str, dict[str, Any]]:
        """The Table 3.3 ablation: variant name -> its restoration settings (none: empty), the
        reference first, then the others by name (the config's key order is not kept)."""
        ablation = self.heal["ablation"] or {"variants": {}, "reference": None}
        variants = ablation["variants"]  # defaults filled by the schema
        order = sorted(variants, key=lambda name: (name != ablation["reference"], name))
        return {name: variants[name] for name in order}

    def ablation_stats(self, wildcards: Any) -> str:
        """The calibration statistics an ablation variant restores from."""
        label = self.ablation()[wildcards.variant]["calibration"]
        calib = Calib(label, self.heal["n_samples"], self.heal["seq_len"])
        return paths.COVARIANCE.format(model=wildcards.model, calib=calib)

    def evaluations(self) -> Columns:
        every = set(self.heal["columns"] or self.care.tasks)
        cols: Columns = {
            (self.model, Healed(m, b)): set(every) for m in self.methods for b in self.budgets
        }
        cols[(self.model, Original())] = set(every)
        return cols

    # ---- input functions ----------------------------------------------------------------------
    def restore_stats(self, wildcards: Any) -> str:
        return paths.COVARIANCE.format(model=wildcards.model, calib=self.calib(wildcards.method))

    def student(self, wildcards: Any) -> str:
        """The model healing starts from: the plain SVD MLA model, or a restored one."""
        if wildcards.method == "svd":
            student = self.svd_student()
            return paths.CONVERTED.format(model=wildcards.model, **student.wildcards())
        return paths.HEAL_INIT.format(model=wildcards.model, method=wildcards.method)

    def data(self) -> str:
        return paths.DATA.format(dataset=self.heal["data"]["dataset"])

    def kind(self) -> str:
        return self.config["data"]["datasets"][self.heal["data"]["dataset"]]["kind"]

    def checkpoints(self) -> list[str]:
        """heal_train's per-budget checkpoint directories (with {model}/{method} wildcards)."""
        return [
            paths.HEALED.format(model="{model}", method="{method}", budget=b) for b in self.budgets
        ]

    # ---- report --------------------------------------------------------------------------------
    def report_params(self) -> dict[str, Any]:
        rows = [
            {
                "method": m,
                "budget": b,
                "variant": str(Healed(m, b)),
                "calibration": str(self.calib(m))
                if m in self.heal["calibration"] and m != "svd"
                else None,
                "file": paths.evaluation(self.model, Healed(m, b)),
            }
            for m in self.methods
            for b in self.budgets
        ]
        curves = {m: paths.HEAL_CURVE.format(model=self.model, method=m) for m in self.methods}
        stats = {m: paths.HEAL_STATS.format(model=self.model, method=m) for m in self.methods}
        return {
            "rows": rows,
            "baseline": paths.evaluation(self.model, Original()),
            "curves": curves,
            "stats": stats,
            "model": self.model,
            "rank": self.rank(),
            "cache": self.heal["cache"],
            "waterfill": list(self.heal["waterfill"]),
            "shrinkage": self.heal["shrinkage"]
            or self.config["care"]["factorize"]["care_shrinkage"],
        }

    def report_items(self) -> list[ReportItem]:
        params = self.report_params()
        paired = table_outputs("thesis_table_3_3_paired", label="Table 3.3, paired validation")
        paired = {"paired_csv": paired["csv"], "paired_md": paired["md"]}
        evals = [r["file"] for r in params["rows"]] + [params["baseline"]]
        table = ReportItem(
            rule="report_heal_table_3_3",
            renderer="heal:render",
            log=paths.REPORT_LOG.format(name="thesis_table_3_3"),
            category=CARE_CATEGORY,
            inputs={
                "evals": evals,
                "stats": list(params["stats"].values()),
                "paper": self.care.paper("table_3_3"),
            },
            outputs=table_outputs("thesis_table_3_3", label="Table 3.3") | paired,
            params={"name": "table_3_3", **params},
        )
        curves = ReportItem(
            rule="report_heal_convergence",
            renderer="heal:render",
            log=paths.REPORT_LOG.format(name="heal_convergence"),
            category=CARE_CATEGORY,
            inputs={"curves": list(params["curves"].values())},
            outputs=figure_outputs("heal_convergence", "Healing convergence"),
            params={"name": "convergence", **params},
        )
        return [table, curves, *self._ablation_items()]

    def _ablation_items(self) -> list[ReportItem]:
        variants = self.ablation()
        if not variants:
            return []
        runs = {v: paths.HEAL_ABLATION.format(model=self.model, variant=v) for v in variants}
        params = {"name": "ablation", "model": self.model, "rank": self.rank(),
                  "budget": self.heal["ablation"]["budget"], "variants": variants,
                  "runs": runs, "reference": self.heal["ablation"]["reference"]}  # fmt: skip
        return [
            ReportItem(
                rule="report_heal_ablation",
                renderer="heal:render",
                log=paths.REPORT_LOG.format(name="thesis_table_3_3_ablation"),
                category=CARE_CATEGORY,
                inputs={"runs": list(runs.values())},
                outputs=table_outputs(
                    "thesis_table_3_3_ablation", label="Table 3.3, ablation of CARE(E) Init"
                ),
                params=params,
            )
        ]
