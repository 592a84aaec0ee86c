"""Infini-gram speculative decoding (thesis ch. 4): responses, indexes, acceptance, speed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kvspec.ngram.registry import CALIBRATION_OF, INDEX_OF, METHOD_INPUTS
from kvspec.plan import paths
from kvspec.plan.items import Output, ReportItem, table_outputs
from kvspec.plan.names import fraction_name


def run_methods(spec: Mapping[str, Any], model: str, bench: str) -> list[str]:
    """The methods a speed job times: greedy and the ranking's on a `spec.ranking` set (the
    main target's), else the model's run's (`spec.speed.runs`)."""
    ranking = spec.get("ranking")
    if ranking and model == spec["target"] and bench in ranking["sets"]:
        return ["greedy", *ranking["methods"]]
    return list(spec["speed"]["runs"][model]["methods"])


def index_inputs(model: str, methods: Iterable[str]) -> dict[str, str]:
    """The n-gram indexes (and their statistics files) of `model` that `methods` draft from,
    keyed by the input names the methods' stages read."""
    inputs = {}
    for name in sorted({n for m in methods for n in METHOD_INPUTS[m]} & set(INDEX_OF)):
        corpus, fraction = INDEX_OF[name]
        index = paths.INDEX.format(model=model, corpus=corpus, fraction=fraction)
        inputs[name], inputs[f"{name}_stats"] = index, f"{index}.json"
    return inputs


ACCEPTANCE_CATEGORY = "Thesis ch. 4 (acceptance)"  # no colon: rst would read a link target
SPEED_CATEGORY = "Thesis ch. 4 (speed)"
# the acceptance analysis replays the SFT responses ("sft") or the target's ("target")
RESPONDERS = ("sft", "target")
# our two benchmark sets that fill Table 4.7's column groups, in order
TABLE_4_7_COLUMNS = ("humaneval", "sft_coding")


class SpecPlan:
    """The speculative-decoding part of the plan (config block `spec`)."""

    def __init__(self, config: Mapping[str, Any], repo: Path) -> None:
        self.config, self.repo = config, repo
        self.spec = config["spec"]
        self.target: str = self.spec["target"]
        self.models: list[str] = sorted(self.spec["generate"]["models"])
        self.fractions = sorted({fraction_name(f) for f in self.spec["index"]["sft_fractions"]})
        self.heldout: list[str] = sorted(self.spec["heldout"])
        self.bench_sets: list[str] = sorted(self.spec["speed"]["sets"])
        self.drafts: list[str] = sorted((self.spec.get("drafts") or {}).get("models", []))

    # ---- generation ---------------------------------------------------------------------------
    def prompt_sources(self, wildcards: Any = None) -> dict[str, str]:
        return {n: paths.DATA.format(dataset=n) for n in self.spec["prompts"]["sources"]}

    def gen_heldout(self, wildcards: Any) -> bool:
        """Only the main target answers held-out prompts (the acceptance analysis positions)."""
        return wildcards.model == self.target

    def shards(self, wildcards: Any) -> list[str]:
        return [
            paths.SHARD.format(model=wildcards.model, shard=i)
            for i in range(self.spec["generate"]["shards"])
        ]

    # ---- indexes and acceptance --------------------------------------------------------------
    def index_inputs(self, wildcards: Any) -> dict[str, str]:
        """SFT responses come with the prompts; target responses from the model's generation."""
        corpus = {"sft": paths.PROMPTS, "responses": paths.RESPONSES.format(model=wildcards.model)}
        return {
            "corpus": corpus[wildcards.corpus],
            "model": paths.MODEL.format(model=wildcards.model),
        }

    def index_fraction(self, wildcards: Any) -> float:
        return float(wildcards.fraction)

    def acceptance_inputs(self, wildcards: Any) -> dict[str, str]:
        index = paths.INDEX.format(
            model=wildcards.model, corpus=wildcards.corpus, fraction=wildcards.fraction
        )
        replayed = {"sft": paths.PROMPTS, "target": paths.RESPONSES.format(model=wildcards.model)}
        return {
            "model": paths.MODEL.format(model=wildcards.model),
            "index": index,
            "index_stats": f"{index}.json",
            "outputs": replayed[wildcards.responder],
        }

    def sweep_rows(self) -> list[dict[str, Any]]:
        """Table 4.1: each SFT index of the size sweep on held-out SFT responses."""
        held = self.spec["acceptance"]["sweep_heldout"]
        return [
            {
                "fraction": float(f),
                "rows": self._acceptance("sft", f, "sft", held),
                "stats": paths.INDEX_STATS.format(model=self.target, corpus="sft", fraction=f),
            }
            for f in self.fractions
        ]

    def main_rows(self) -> list[dict[str, Any]]:
        """Tables 4.2-4.6: the full SFT and target indexes on held-out target responses."""
        return [
            {
                "heldout": held,
                "index": corpus,
                "file": self._acceptance(corpus, "1", "target", held),
            }
            for corpus in ("sft", "responses")
            for held in self.spec["acceptance"]["heldout"]
        ]

    def _acceptance(self, corpus: str, fraction: str, responder: str, heldout: str) -> str:
        return paths.ACCEPTANCE.format(
            model=self.target,
            corpus=corpus,
            fraction=fraction,
            responder=responder,
            heldout=heldout,
        )

    # ---- speed ----------------------------------------------------------------------------------
    def speed_methods(self, wildcards: Any) -> list[str]:
        return run_methods(self.spec, wildcards.model, wildcards.bench)

    def speed_set(self, wildcards: Any) -> dict[str, Any]:
        return self.bench_set(wildcards.bench)

    def bench_set(self, name: str) -> dict[str, Any]:
        """A benchmark set, with the kind of its prompt source (held-out, code or math)."""
        bench = dict(self.spec["speed"]["sets"][name], name=name)
        src = bench["prompts"]
        kind = "heldout" if src in self.spec["heldout"] else None
        bench["kind"] = kind or self.config["data"]["datasets"][src]["kind"]
        return bench

    def bench_prompts(self, name: str) -> str:
        """The file a benchmark set's prompts come from."""
        src = self.spec["speed"]["sets"][name]["prompts"]
        return paths.PROMPTS if src in self.spec["heldout"] else paths.DATA.format(dataset=src)

    def speed_inputs(self, wildcards: Any) -> dict[str, str]:
        """Target, prompts, and whatever the listed methods need (draft model, indexes)."""
        prompts = self.bench_prompts(wildcards.bench)
        inputs = {"model": paths.MODEL.format(model=wildcards.model), "prompts": prompts}
        needs = {n for m in self.speed_methods(wildcards) for n in METHOD_INPUTS[m]}
        if "draft" in needs:
            inputs["draft"] = paths.MODEL.format(model=self.spec["draft"])
        if "arctic_suffix" in needs:
            inputs["arctic_suffix"] = paths.ARCTIC_SUFFIX
            inputs["responses"] = paths.RESPONSES.format(model=wildcards.model)
        if "llama_cpp" in needs:
            inputs["llama_cpp"] = paths.LLAMA_CPP
            inputs["gguf"] = paths.GGUF.format(model=wildcards.model)
        inputs |= index_inputs(wildcards.model, self.speed_methods(wildcards))
        if wildcards.model == self.target:  # only the main target has acceptance rows
            for name in sorted(needs & set(CALIBRATION_OF)):
                corpus = INDEX_OF[CALIBRATION_OF[name]][0]
                held = self.spec["acceptance"]["heldout"][0]
                inputs[name] = self._acceptance(corpus, "1", "target", held)
        return inputs

    def latency_inputs(self, wildcards: Any) -> dict[str, str]:
        """The model's target-response index and its responses (held-out ones are timed)."""
        index = paths.INDEX.format(model=wildcards.model, corpus="responses", fraction="1")
        return {
            "index": index,
            "index_stats": f"{index}.json",
            "responses": paths.RESPONSES.format(model=wildcards.model),
        }

    def speed_rows(self, main: bool) -> list[dict[str, str]]:
        """Speed summaries (`file`) and runs (`runs`) of the main target (Table 4.7) or of the
        other models (Table 4.8)."""
        runs = self.spec["speed"]["runs"]
        return [
            {
                "model": model,
                "bench": bench,
                "file": paths.SPEED_SUMMARY.format(model=model, bench=bench),
                "runs": paths.SPEED_RUNS.format(model=model, bench=bench),
            }
            for model in sorted(runs)
            if (model == self.target) == main
            for bench in runs[model]["sets"]
        ]

    # ---- beyond the documents: a healed MLA target with infini-gram drafting ------------------
    @property
    def mla(self) -> dict[str, Any] | None:
        """The `spec.mla_target` block (None when off)."""
        return self.spec.get("mla_target")

    def mla_models(self) -> dict[str, str]:
        """{label: input name} the long-context run times, the GQA original first."""
        heal = self.config["care"]["heal"]
        label = f"{self.mla['method']} healed ({heal['train']['budgets'][-1]} tokens, MLA)"
        return {"GQA (original)": "model", label: "mla"}

    def mla_inputs(self, wildcards: Any = None) -> dict[str, str]:
        """Both models, the benchmark questions, the history (the target's responses), the
        target-response index and the adaptive methods' acceptance rows."""
        budget = self.config["care"]["heal"]["train"]["budgets"][-1]
        index = paths.INDEX.format(model=self.target, corpus="responses", fraction="1")
        inputs = {
            "model": paths.MODEL.format(model=self.target),
            "mla": paths.HEALED.format(model=self.target, method=self.mla["method"],
                                       budget=budget),
            "prompts": self.bench_prompts(self.mla["bench"]),
            "responses": paths.RESPONSES.format(model=self.target),
            "index_target": index,
            "index_target_stats": f"{index}.json",
        }  # fmt: skip
        needs = {n for m in self.mla["methods"] for n in METHOD_INPUTS[m]}
        if "calib_index_target" in needs:
            held = self.spec["acceptance"]["heldout"][0]
            inputs["calib_index_target"] = self._acceptance("responses", "1", "target", held)
        return inputs

    def _mla_item(self) -> ReportItem:
        return ReportItem(
            rule="report_spec_mla",
            renderer="mla_speed:render",
            log=paths.REPORT_LOG.format(name="spec_mla"),
            category=SPEED_CATEGORY,
            inputs={"runs": [paths.MLA_SPEED.format(model=self.target)]},
            outputs=table_outputs("thesis_mla_infinigram",
                                  label="CARE-converted target with infini-gram drafting"),
            params={"bench": self.bench_set(self.mla["bench"]) | {"n": self.mla["n"]}},
        )  # fmt: skip

    def _ranking_item(self) -> ReportItem:
        """Ours against a reference on prompts no choice of ours was made on: its own target
        (`snakemake ranking`), part of the whole study but not of the thesis's."""
        ranking = self.spec["ranking"]
        reference = ranking["methods"][-1]
        runs = [paths.SPEED_RUNS.format(model=self.target, bench=b) for b in ranking["sets"]]
        labels = {b: self.spec["speed"]["sets"][b].get("label") or b for b in ranking["sets"]}
        return ReportItem(
            rule="report_spec_ranking",
            renderer="ranking:render",
            log=paths.REPORT_LOG.format(name="spec_ranking"),
            category=SPEED_CATEGORY,
            inputs={"runs": runs},
            outputs=table_outputs("thesis_ranking", label=f"ranked against {reference}"),
            params={"sets": labels, "reference": reference, "note": ranking["note"]},
            document="ranking",
        )

    # ---- draft models -------------------------------------------------------------------------
    def draft_target(self, model: str) -> str:
        """What a draft drafts for: the model it is distilled from, else the main target."""
        distil = self.config["models"][model].get("distil")
        return distil["teacher"] if distil else self.target

    def draft_quality_inputs(self, wildcards: Any) -> dict[str, str]:
        """Target, draft, and the prompt file of each measured set (`prompts_<set>`)."""
        target = self.draft_target(wildcards.model)
        inputs = {
            "target": paths.MODEL.format(model=target),
            "draft": paths.MODEL.format(model=wildcards.model),
        }
        return inputs | {f"prompts_{n}": self.bench_prompts(n) for n in self.spec["drafts"]["sets"]}

    def draft_sets(self, wildcards: Any = None) -> dict[str, dict[str, Any]]:
        """The prompt sets every draft is measured on (none without a `spec.drafts` block)."""
        return {n: self.bench_set(n) for n in (self.spec.get("drafts") or {}).get("sets", [])}

    def draft_rows(self) -> list[dict[str, Any]]:
        """One row per measured draft: its quality file and, if distilled, its stats."""
        rows = []
        for model in self.drafts:
            distilled = bool(self.config["models"][model].get("distil"))
            stats = paths.DISTIL_STATS.format(model=model) if distilled else None
            quality = paths.DRAFT_QUALITY.format(model=model)
            target = self.draft_target(model)
            rows.append({"model": model, "target": target, "quality": quality, "stats": stats})
        return rows

    def _drafts_item(self) -> ReportItem:
        rows = self.draft_rows()
        labels = {
            n: self.spec["speed"]["sets"][n].get("label") or n for n in self.spec["drafts"]["sets"]
        }
        return ReportItem(
            rule="report_draft_quality",
            renderer="drafts:render",
            log=paths.REPORT_LOG.format(name="draft_quality"),
            category=SPEED_CATEGORY,
            inputs={
                "quality": [r["quality"] for r in rows],
                "stats": [r["stats"] for r in rows if r["stats"]],
            },
            outputs=table_outputs("draft_quality", label="draft models"),
            params={"rows": rows, "labels": labels},
        )

    # ---- report -------------------------------------------------------------------------------
    def _paper(self, numbers: range) -> dict[str, list[str]]:
        return {
            f"t4_{n}": [str(self.repo / paths.PAPER.format(name=f"thesis_table_4_{n}"))]
            for n in numbers
        }

    def _tables(self, numbers: range) -> dict[str, Output]:
        out = {}
        for n in numbers:
            stem = f"thesis_table_4_{n}"
            out[f"t4_{n}"] = Output(paths.report(stem, "csv"), stem, f"Table 4.{n}")
            out[f"t4_{n}_md"] = Output(paths.report(stem, "md"))
        return out

    def report_items(self) -> list[ReportItem]:
        sweep, main = self.sweep_rows(), self.main_rows()
        figure = "thesis_figure_4_1"
        acceptance = ReportItem(
            rule="report_spec_acceptance",
            renderer="spec:render_acceptance",
            log=paths.REPORT_LOG.format(name="spec_acceptance"),
            category=ACCEPTANCE_CATEGORY,
            inputs={
                **self._paper(range(1, 7)),
                "sweep": [r["rows"] for r in sweep],
                "stats": [r["stats"] for r in sweep],
                "main": [r["file"] for r in main],
            },
            outputs={
                **self._tables(range(1, 7)),
                "f4_1_png": Output(paths.report(figure, "png"), figure, "Figure 4.1"),
                "f4_1_pdf": Output(paths.report(figure, "pdf")),
                "f4_1_csv": Output(paths.report(figure, "csv")),
                **{
                    f"exact_{k}": v
                    for k, v in table_outputs(
                        "acceptance_by_match_length", label="acceptance by match length"
                    ).items()
                },
            },
            params={"sweep": sweep, "main": main, "settings": self.spec["acceptance"]},
        )
        main_speed, other = self.speed_rows(True), self.speed_rows(False)
        sets = self.spec["speed"]["runs"].get(self.target, {}).get("sets", [])
        labels = {n: s.get("label") or n for n, s in self.spec["speed"]["sets"].items()}
        speed = ReportItem(
            rule="report_spec_speed",
            renderer="spec:render_speed",
            log=paths.REPORT_LOG.format(name="spec_speed"),
            category=SPEED_CATEGORY,
            inputs={
                **self._paper(range(7, 9)),
                "main": [r["file"] for r in main_speed],
                "main_runs": [r["runs"] for r in main_speed],
                "other": [r["file"] for r in other],
                "latency": [paths.DRAFT_LATENCY.format(model=self.target)],
            },
            outputs={
                **self._tables(range(7, 9)),
                **{
                    f"latency_{k}": v
                    for k, v in table_outputs("draft_latency", label="draft latency").items()
                },
            },
            params={
                "main": main_speed,
                "other": other,
                "labels": labels,
                "columns": dict(zip(TABLE_4_7_COLUMNS, sets, strict=False)),
                "latency": dict(self.spec["latency"]),
            },
        )
        drafts = [self._drafts_item()] if self.drafts else []
        beyond = [self._mla_item()] if self.mla else []
        beyond += [self._ranking_item()] if self.spec.get("ranking") else []
        return [acceptance, speed, *drafts, *beyond]
