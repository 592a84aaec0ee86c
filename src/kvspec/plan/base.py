"""Datasets, models and pretraining: the inputs every later stage starts from."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvspec.plan import paths
from kvspec.plan.items import Output, ReportItem, figure_outputs, table_outputs


class BasePlan:
    """Datasets (one normalized file each), models (fetched or pretrained), their reports."""

    def __init__(self, config: Mapping[str, Any], repo: Path) -> None:
        self.config, self.repo = config, repo
        self.datasets: list[str] = sorted(config["data"]["datasets"])
        self.models: list[str] = sorted(config["models"])
        declared = config["models"]
        self.pretrained = [m for m in self.models if declared[m].get("pretrain")]
        self.hub_models = [m for m in self.models if declared[m].get("hub")]
        self.packaged = [m for m in self.models if declared[m].get("gguf")]
        self.distilled = [m for m in self.models if declared[m].get("distil")]

    def dataset_decl(self, wildcards: Any) -> dict[str, Any]:
        """A dataset's declaration, less its free-text note (editing a note reruns nothing)."""
        decl = self.config["data"]["datasets"][wildcards.dataset]
        return {k: v for k, v in decl.items() if k != "note"}

    def teacher(self, model: str) -> str:
        """The model `model` is distilled from."""
        return self.config["models"][model]["distil"]["teacher"]

    def distil_inputs(self, wildcards: Any) -> dict[str, str]:
        """The teacher model, its greedy responses (held-out prompts included; the
        distillation keeps only the index prompts and drops them from its corpus), the
        corpus datasets (`corpus_<name>`) and the trained draft it starts from with its stats
        (`start`, `start_stats`; only with `distil.start`)."""
        decl = self.config["models"][wildcards.model]["distil"]
        teacher = decl["teacher"]
        corpus = decl["data"]["corpus"] if decl["data"]["corpus_limit"] else []
        start = decl.get("start")
        return {
            "teacher": paths.MODEL.format(model=teacher),
            "responses": paths.RESPONSES.format(model=teacher),
            **{f"corpus_{n}": paths.DATA.format(dataset=n) for n in corpus},
            **({"start": paths.MODEL.format(model=start),
                "start_stats": paths.DISTIL_STATS.format(model=start)} if start else {}),
        }  # fmt: skip

    def start_layers(self, wildcards: Any) -> list[int] | None:
        """The teacher layers the trained draft a distillation starts from was cut from
        (`models.<model>.distil.start`; None without one)."""
        start = self.config["models"][wildcards.model]["distil"].get("start")
        return self.config["models"][start]["distil"]["layers"] if start else None

    def hub_id(self, wildcards: Any) -> str:
        return self.config["models"][wildcards.model]["hub"]

    def pretrain_sources(self, wildcards: Any = None) -> dict[str, str]:
        return {n: paths.DATA.format(dataset=n) for n in self.config["pretrain"]["sources"]}

    def pretrain_kinds(self, wildcards: Any = None) -> dict[str, str]:
        datasets = self.config["data"]["datasets"]
        return {n: datasets[n]["kind"] for n in self.config["pretrain"]["sources"]}

    def report_items(self) -> list[ReportItem]:
        paper = str(self.repo / paths.PAPER.format(name="thesis_table_2_1"))
        items = [
            ReportItem(
                rule="report_table_2_1",
                renderer="tables:render_paper_only",
                log=paths.REPORT_LOG.format(name="thesis_table_2_1"),
                category="Thesis ch. 2",
                inputs={"paper": [paper]},
                outputs=table_outputs("thesis_table_2_1", label="Table 2.1"),
            ),
            self._sources_item(),
        ]
        items.append(self._models_item())
        return items + ([self._pretrain_item()] if self.pretrained else [])

    def _models_item(self) -> ReportItem:
        declared = self.config["models"]
        rows = [
            {"model": m, "role": declared[m].get("role") or m,
             "source": next(s for s in ("gguf", "pretrain", "distil", "hub") if declared[m].get(s)),
             "start": (declared[m].get("distil") or {}).get("start"),
             "dir": paths.MODEL.format(model=m)}
            for m in self.models
        ]  # fmt: skip
        return ReportItem(
            rule="report_models",
            renderer="models:render",
            log=paths.REPORT_LOG.format(name="models"),
            category="Models", inputs={"models": [r["dir"] for r in rows]},
            outputs=table_outputs("models", label="models"), params={"rows": rows},
        )  # fmt: skip

    def _sources_item(self) -> ReportItem:
        declared = self.config["data"]["datasets"]
        rows = [
            {"dataset": n, "meta": paths.DATA_META.format(dataset=n), "note": declared[n]["note"]}
            for n in self.datasets
        ]
        return ReportItem(
            rule="data_sources",
            renderer="data:render_sources",
            log=paths.LOG["data_sources"],
            category="Data",
            inputs={"meta": [r["meta"] for r in rows]},
            outputs=table_outputs("data_sources", label="data sources"),
            params={"rows": rows},
        )

    def _pretrain_item(self) -> ReportItem:
        rows = [
            {
                "model": m,
                "curve": paths.PRETRAIN_CURVE.format(model=m),
                "stats": paths.PRETRAIN_STATS.format(model=m),
            }
            for m in self.pretrained
        ]
        outputs = figure_outputs("pretrain_loss", "loss curves")
        del outputs["csv"]
        outputs |= {
            "csv": Output(paths.report("pretrain_summary", "csv"), "pretrain_summary", "summary"),
            "md": Output(paths.report("pretrain_summary", "md")),
        }
        return ReportItem(
            rule="report_pretrain",
            renderer="pretrain:render",
            log=paths.REPORT_LOG.format(name="pretrain"),
            category="Pretraining",
            inputs={
                "curves": [r["curve"] for r in rows],
                "stats": [r["stats"] for r in rows],
                "tokens": [paths.PRETRAIN_TOKENS],
            },
            outputs=outputs,
            params={"rows": rows},
        )
