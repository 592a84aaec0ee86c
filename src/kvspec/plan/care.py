"""CARE (thesis ch. 3): converted variants, their evaluated columns, rank plans, report items.

Every table and figure is a list of rows; each row names a model variant (`kvspec.plan.names`)
and what it means (method, rank, calibration set, ...). The evaluations, conversions, factor
files and calibration statistics the workflow runs are exactly those some row needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvspec.config import kv_width, resolve_ranks
from kvspec.plan import paths
from kvspec.plan.items import ReportItem, figure_outputs, files_of, table_outputs
from kvspec.plan.names import Calib, Converted, Evaluated, Factors, Original, RankPlan

Columns = dict[tuple[str, Evaluated], set[str]]
Limits = dict[tuple[str, Evaluated], dict[str, int]]
CARE_CATEGORY = "Thesis ch. 3 (CARE)"
TABLES = ("table_3_1", "table_3_2", "table_3_4", "table_3_5")
FIGURES = ("figure_3_1", "figure_3_3", "figure_3_4")
LABELS = {
    "table_3_1": "Table 3.1",
    "table_3_2": "Table 3.2",
    "table_3_4": "Table 3.4",
    "table_3_5": "Table 3.5",
    "figure_3_1": "Figure 3.1",
    "figure_3_3": "Figure 3.3",
    "figure_3_4": "Figure 3.4",
}


class CarePlan:
    """The CARE part of the plan, computed once from the validated config."""

    def __init__(self, config: Mapping[str, Any], repo: Path) -> None:
        self.config, self.repo = config, repo
        self.care = config["care"]
        self.main: str = self.care["model"]
        self.decode_speed = bool(self.care["decode_speed"])  # the decode-speed job is planned
        self.alt: str | None = self.care["alt_model"]
        self.tasks: dict[str, Any] = config["eval"]["tasks"]

    # ---- names ------------------------------------------------------------------------------
    def calib(self, label: str | None = None, n: int | None = None, t: int | None = None) -> Calib:
        """A calibration set; the default set, N and T unless given."""
        cal = self.care["calibration"]
        return Calib(label or cal["default"], n or cal["n_samples"], t or cal["seq_len"])

    def ranks(self, model: str, block: str | None) -> list[int]:
        """The integer ranks of `care.ranks` (block None) or `care.<block>.ranks` for `model`;
        block "alt_ranks" is Table 3.2's own `care.alt_ranks`."""
        if block == "alt_ranks":
            spec, key = self.care["alt_ranks"], "care.alt_ranks"
        else:
            spec = self.care["ranks"] if block is None else self.care[block]["ranks"]
            key = "care.ranks" if block is None else f"care.{block}.ranks"
        return resolve_ranks(spec, kv_width(self.config, model), key)

    def table_model(self, name: str) -> str:
        """The model of Table 3.1 (`care.model`) or 3.2 (`care.alt_model`)."""
        model = self.main if name == "table_3_1" else self.alt
        if model is None:
            raise ValueError(f"{name} has no model (care.alt_model is null)")
        return model

    def _converted(self, method: str, calib: Calib, kind: str, value: int) -> Converted:
        return Converted(Factors.of(method, calib), RankPlan(kind, value))

    # ---- rows of each table and figure -------------------------------------------------------
    def table_rows(self, name: str) -> list[dict[str, Any]]:
        """Tables 3.1/3.2 (`name`): the original GQA model, then each method x rank; Table 3.2
        takes `care.alt_ranks` when given."""
        model = self.table_model(name)
        own = name == "table_3_2" and self.care["alt_ranks"] is not None
        rows = [{"label": "GQA (Original)", "rank": None, "variant": Original()}]
        for method in self.care["methods"]:
            fact, alloc = method.split("-")
            for r in self.ranks(model, "alt_ranks" if own else None):
                variant = self._converted(fact, self.calib(), alloc, r)
                rows.append({"label": method, "rank": r, "variant": variant})
        return rows

    def decided(self) -> Limits:
        """`care.decide`: the GQA row and the methods at the decide ranks of each of its
        tables, with the document limits they are scored on (every table reading one of those
        variants shows the same evaluation)."""
        decide = self.care["decide"]
        out: Limits = {}
        for table in decide["tables"] if decide else []:
            model = self.table_model(table)
            ranks = set(self.ranks(model, "decide")) | {None}
            rows = [r for r in self.table_rows(table) if r["rank"] in ranks]
            out |= {(model, r["variant"]): dict(decide["limits"]) for r in rows}
        return out

    def table_3_4_rows(self) -> list[dict[str, Any]]:
        """CARE-E per calibration set and rank."""
        return [
            {
                "label": label,
                "rank": r,
                "variant": self._converted("care", self.calib(label), "waterfill", r),
            }
            for label in self.care["table_3_4"]["calibration"]
            for r in self.ranks(self.main, "table_3_4")
        ]

    def table_3_5_rows(self) -> list[dict[str, Any]]:
        """CARE-U vs CARE-E per rank."""
        return [
            {"label": alloc, "rank": r, "variant": self._converted("care", self.calib(), alloc, r)}
            for r in self.ranks(self.main, "table_3_5")
            for alloc in ("uniform", "waterfill")
        ]

    def figure_3_4_rows(self) -> list[dict[str, Any]]:
        """Sample counts at fixed T, then lengths at fixed N."""
        fig = self.care["figure_3_4"]
        points = [("n_samples", n, fig["fixed_seq_len"]) for n in fig["n_samples"]]
        points += [("seq_len", fig["fixed_n_samples"], t) for t in fig["seq_lens"]]
        return [
            {
                "sweep": sweep,
                "n": n,
                "t": t,
                "rank": r,
                "variant": self._converted("care", self.calib(None, n, t), "waterfill", r),
            }
            for sweep, n, t in points
            for r in self.ranks(self.main, "figure_3_4")
        ]

    def figure_3_1_rows(self) -> list[dict[str, Any]]:
        """One layer's rank halved (panel "halve"), one singular-value group removed ("svgroup")."""
        fig = self.care["figure_3_1"]
        layers = fig["layers"] if fig["layers"] is not None else range(self._layers(fig["model"]))
        points = [("halve", i) for i in layers] + [("svgroup", g) for g in range(fig["groups"])]
        return [
            {
                "panel": panel,
                "index": i,
                "variant": self._converted(fig["method"], self.calib(), panel, i),
            }
            for panel, i in points
        ]

    def figure_3_3_rows(self) -> list[dict[str, Any]]:
        """Water-filled rank plans (not models) per calibration set and rank."""
        return [
            {
                "label": label,
                "rank": r,
                "variant": self._converted("care", self.calib(label), "waterfill", r),
            }
            for label in self.care["figure_3_3"]["calibration"]
            for r in self.ranks(self.main, "figure_3_3")
        ]

    def _layers(self, model: str) -> int:
        return self.config["models"][model]["pretrain"]["arch"]["layers"]

    # ---- what runs -------------------------------------------------------------------------
    def tables(self) -> list[str]:
        """Tables 3.1 and, when `care.alt_model` is set, 3.2."""
        return ["table_3_1", "table_3_2"] if self.alt else ["table_3_1"]

    def evaluations(self) -> Columns:
        """(model, variant) -> the eval.tasks columns some table or figure reads from it."""
        cols: Columns = {}

        def add(model: str, variant: Evaluated, columns: list[str]) -> None:
            cols.setdefault((model, variant), set()).update(columns)

        every = self.care["columns"] or list(self.tasks)
        for name in self.tables():
            for row in self.table_rows(name):
                add(self.table_model(name), row["variant"], every)
        for block, rows in (
            ("table_3_4", self.table_3_4_rows()),
            ("table_3_5", self.table_3_5_rows()),
            ("figure_3_4", self.figure_3_4_rows()),
        ):
            for row in rows:
                add(self.main, row["variant"], self.care[block]["columns"])
        fig = self.care["figure_3_1"]
        for row in self.figure_3_1_rows():
            panel = "halve" if row["panel"] == "halve" else "group"
            add(fig["model"], row["variant"], fig[f"{panel}_columns"])
        add(fig["model"], Original(), fig["halve_columns"] + fig["group_columns"])
        return cols

    def rank_plans(self) -> set[tuple[str, Converted]]:
        """Rank plans read by Figure 3.3 (the converted models' plans follow from them)."""
        return {(self.main, row["variant"]) for row in self.figure_3_3_rows()}

    # ---- input functions (bound methods; Snakemake passes the job's wildcards) --------------
    def calib_data(self, wildcards: Any) -> str:
        label = Calib.parse(wildcards.calib).label
        return paths.DATA.format(dataset=self.care["calibration"]["sets"][label])

    def calib_settings(self, wildcards: Any) -> dict[str, Any]:
        calib = Calib.parse(wildcards.calib)
        dataset = self.care["calibration"]["sets"][calib.label]
        return {
            "n_samples": calib.n,
            "seq_len": calib.t,
            "batch_size": self.care["calibration"]["batch_size"],
            "kind": self.config["data"]["datasets"][dataset]["kind"],
        }

    def factor_inputs(self, wildcards: Any) -> dict[str, str]:
        """Source model, plus the covariance file unless the method is plain SVD."""
        factors = Factors(
            wildcards.fact, None if wildcards.calib == "none" else Calib.parse(wildcards.calib)
        )
        inputs = {"model": paths.MODEL.format(model=wildcards.model)}
        if factors.calib is not None:
            inputs["stats"] = paths.COVARIANCE.format(model=wildcards.model, calib=factors.calib)
        return inputs

    def sensitivity_opts(self, wildcards: Any) -> dict[str, Any]:
        """Figure 3.1c settings; halving plans need none (editing them reruns no halving)."""
        if RankPlan.parse(wildcards.plan).kind == "halve":
            return {}
        fig = self.care["figure_3_1"]
        return {"groups": fig["groups"], "last_layers": fig["last_layers"]}

    # ---- report ---------------------------------------------------------------------------
    # ---- decode speed: GQA vs MLA at long contexts --------------------------------------------
    def decode_speed_models(self, wildcards: Any = None) -> dict[str, str]:
        """{label: model directory} the decode-speed rule measures: the original first, then the
        `care.decode_speed.method` conversion (a Table 3.1 model) at each of its ranks; the job
        rebuilds and times a restoration after them (`decode_speed_restored`)."""
        spec, main = self.care["decode_speed"], self.main
        models = {"GQA (original)": paths.MODEL.format(model=main)}
        fact, alloc = spec["method"].split("-")
        for r in self.ranks(main, "decode_speed"):
            v = self._converted(fact, self.calib(), alloc, r)
            path = paths.CONVERTED.format(model=main, **v.wildcards())
            models[f"MLA {spec['method']} r={r}"] = path
        return models

    def decode_speed_restored(self) -> str | None:
        """The healing method whose full restoration (DeepSeek-V3 layout, Table 3.3's rank) the
        decode-speed job also times, when `care.decode_speed.restored` is set: the first restored
        method healing plans for the same model (None: no such method)."""
        heal = self.care.get("heal") or {}
        restored = [m for m in heal.get("methods", []) if m != "svd"]
        if self.care["decode_speed"]["restored"] and heal.get("model") == self.main and restored:
            return restored[0]
        return None

    def decode_speed_item(self) -> ReportItem:
        return ReportItem(
            rule="report_care_decode_speed",
            renderer="decode_speed:render",
            log=paths.REPORT_LOG.format(name="care_decode_speed"),
            category=CARE_CATEGORY,
            inputs={"speed": [paths.DECODE_SPEED.format(model=self.main)]},
            outputs=table_outputs("care_decode_speed", label="MLA vs GQA decode speed"),
            params={"model": self.main},
        )

    def paper(self, item: str) -> list[str]:
        """The thesis's numbers for an item, when transcribed (none for Figures 3.3 and 3.4)."""
        path = self.repo / paths.PAPER.format(name=f"thesis_{item}")
        return [str(path)] if path.is_file() else []

    def report_items(self) -> list[ReportItem]:
        items = ["table_3_1", "table_3_2", "table_3_4", "table_3_5", *FIGURES]
        speed = [self.decode_speed_item()] if self.care["decode_speed"] else []
        return [self._item(i) for i in items if i != "table_3_2" or self.alt] + speed

    def _item(self, name: str) -> ReportItem:
        params = self._item_params(name)
        files = files_of(params["rows"]) + ([params["baseline"]] if "baseline" in params else [])
        stem = f"thesis_{name}"
        outputs = (
            table_outputs(stem, label=LABELS[name])
            if name in TABLES
            else figure_outputs(stem, LABELS[name])
        )
        if name in ("table_3_1", "table_3_2"):  # CARE-E vs SVD and ASVD, paired differences
            paired = table_outputs(f"{stem}_paired", label=f"{LABELS[name]}, paired differences")
            outputs |= {"paired_csv": paired["csv"], "paired_md": paired["md"]}
        return ReportItem(
            rule=f"report_care_{name}",
            renderer="care:render",
            log=paths.REPORT_LOG.format(name=stem),
            category=CARE_CATEGORY,
            inputs={"evals": files, "paper": self.paper(name)},
            outputs=outputs,
            params={"name": name, **params},
        )

    def _item_params(self, name: str) -> dict[str, Any]:
        """Rows (with the file each reads) and the settings the renderer needs."""
        main = self.main
        if name in ("table_3_1", "table_3_2"):
            model = self.table_model(name)
            return {"rows": _with_files(self.table_rows(name), model), "model": model}
        if name in ("table_3_4", "table_3_5"):
            rows = self.table_3_4_rows() if name == "table_3_4" else self.table_3_5_rows()
            return {
                "rows": _with_files(rows, main),
                "model": main,
                "columns": self.care[name]["columns"],
            }
        if name == "figure_3_4":
            return {
                "rows": _with_files(self.figure_3_4_rows(), main),
                "model": main,
                "columns": self.care["figure_3_4"]["columns"],
            }
        if name == "figure_3_3":
            return {"rows": _with_files(self.figure_3_3_rows(), main, plan=True), "model": main}
        fig = self.care["figure_3_1"]
        return {
            "rows": _with_files(self.figure_3_1_rows(), fig["model"]),
            "baseline": paths.evaluation(fig["model"], Original()),
            **fig,
        }


def _with_files(rows: list[dict[str, Any]], model: str, plan: bool = False) -> list[dict]:
    """Rows as plain dicts: the variant as its name, plus the evaluation (or rank-plan) file."""
    out = []
    for row in rows:
        variant = row["variant"]
        if plan:
            file = paths.RANK_PLAN.format(model=model, **variant.wildcards())
        else:
            file = paths.evaluation(model, variant)
        out.append(
            {
                **{k: v for k, v in row.items() if k != "variant"},
                "variant": str(variant),
                "file": file,
            }
        )
    return out
