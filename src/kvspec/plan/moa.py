"""Document 002 (Mixture of Attentions): drafters trained against the target, then decoded
with chain and EAGLE-2 tree drafting on Spec-Bench-style prompt sets beside greedy decoding
and the n-gram methods, side by side in one job per model; Table 5's ablation heads (chain
drafting on one set) join the target's job; the quality of every method's outputs (Table 8)
is scored from that job's tokens; `alt` repeats the decoding job on a second target
(Table 9)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kvspec.plan import paths
from kvspec.plan.items import Output, ReportItem, figure_outputs, table_outputs
from kvspec.plan.names import HeadRun
from kvspec.plan.spec import index_inputs
from kvspec.seeds import derive

CATEGORY = "Mixture of Attentions drafters (document 002)"
# report stem -> (renderer, label); tables 1 and 6 are the document's own (transcribed)
MEASURED = {
    "moa_table_2": ("render_table_2", "Table 2"),
    "moa_table_5": ("render_table_5", "Table 5"),
    "moa_table_10": ("render_table_10", "Table 10"),
}
QUALITY = {"moa_table_8": ("render_table_8", "Table 8")}
ALT = {"moa_table_9": ("render_table_9", "Table 9")}
TRANSCRIBED = {"moa_table_1": "Table 1", "moa_table_6": "Table 6"}


class MoAPlan:
    """Config block `moa`: one training job per (model, drafter), one decoding job per model."""

    def __init__(self, config: Mapping[str, Any], repo: Path, spec: Any) -> None:
        self.config, self.repo, self.spec = config, repo, spec
        self.moa = config["moa"]
        self.target: str = self.moa["target"]
        self.ablation: Mapping[str, Any] = self.moa.get("ablation") or {}
        self.repeats: int = self.ablation["repeats"] if self.ablation else 1
        self.alt: Mapping[str, Any] = self.moa.get("alt") or {}
        sweep = self.moa.get("vocab_sweep")
        self.vocab_sweep = dict(sweep, sizes=list(sweep["sizes"])) if sweep else None
        self.quality: Mapping[str, str] = (self.moa.get("quality") or {}).get("sets") or {}

    # ---------------------------------------------------------------- jobs and their inputs

    def models(self) -> list[str]:
        """The targets with a decoding job: moa.target, then moa.alt's."""
        return [self.target, *([self.alt["target"]] if self.alt else [])]

    def declarations(self) -> dict[str, Mapping[str, Any]]:
        """Every drafter by name: the main ones, then Table 5's ablation heads."""
        return {**self.moa["drafters"], **(self.ablation.get("drafters") or {})}

    def drafters_of(self, model: str) -> list[str]:
        """The heads trained against `model` (the target: main + ablation, then Table 5's
        retrainings; alt: its list)."""
        if model == self.target:
            return [*self.declarations(), *self.repeat_runs()]
        return list(self.alt["drafters"]) if self.alt and model == self.alt["target"] else []

    def repeat_runs(self) -> list[str]:
        """Table 5's retrainings: every head of the target again as repeats 1 ..
        moa.ablation.repeats - 1, each under its own seed (decoded on the ablation set)."""
        runs = [HeadRun(d, r) for r in range(1, self.repeats) for d in self.declarations()]
        return [str(run) for run in runs]

    def seed_of(self, wildcards: Any) -> int:
        """A training job's seed: the run's for a head every table reads (repeat 0), a stream
        split from it per repeat for Table 5's retrainings."""
        repeat = HeadRun.parse(wildcards.drafter).repeat
        return self.config["seed"] if repeat == 0 else derive(self.config["seed"], "moa repeat",
                                                               repeat)  # fmt: skip

    def heads(self) -> list[str]:
        heads = [(m, d) for m in self.models() for d in self.drafters_of(m)]
        return [paths.MOA_HEAD.format(model=m, drafter=d) for m, d in heads]

    def outputs(self, model: str | None = None) -> list[str]:
        """The decoding job's outputs of `model` (default: moa.target)."""
        model = model or self.target
        return [p.format(model=model) for p in (paths.MOA_BENCH_RUNS, paths.MOA_BENCH_SUMMARY)]

    def quality_outputs(self) -> list[str]:
        patterns = (paths.MOA_QUALITY_RUNS, paths.MOA_QUALITY_SUMMARY)
        return [p.format(model=self.target) for p in patterns]

    def train_inputs(self, wildcards: Any) -> dict[str, str]:
        return {"target": paths.MODEL.format(model=wildcards.model),
                "responses": paths.RESPONSES.format(model=wildcards.model)}  # fmt: skip

    def train_of(self, wildcards: Any) -> dict[str, Any]:
        """moa.train, with moa.alt.train's keys over it for the second target."""
        extra = (self.alt.get("train") or {}) if wildcards.model != self.target else {}
        return {**self.moa["train"], **extra}

    def data_of(self, wildcards: Any) -> dict[str, Any]:
        """moa.data (moa.alt.data's keys over it for the second target) and where the
        target's state cache lives."""
        extra = (self.alt.get("data") or {}) if wildcards.model != self.target else {}
        cache = paths.MOA_STATES.format(model=wildcards.model)
        return {**self.moa["data"], **extra, "state_cache": cache}

    def drafter(self, wildcards: Any) -> dict[str, Any]:
        """The declaration of the drafter a training job builds."""
        decl = self.declarations()[HeadRun.parse(wildcards.drafter).drafter]
        return {k: v for k, v in decl.items() if k != "label"}

    def bench_inputs(self, wildcards: Any) -> dict[str, str]:
        """The model, every head, every set's prompt file and the indexes the baselines read."""
        model = wildcards.model
        inputs = {"model": paths.MODEL.format(model=model)}
        for d in self.drafters_of(model):
            inputs[f"head_{d}"] = paths.MOA_HEAD.format(model=model, drafter=d)
        for name, s in self.moa["sets"].items():
            src = s["prompts"]
            held = src in self.spec.spec["heldout"]
            inputs[f"prompts_{name}"] = paths.PROMPTS if held else paths.DATA.format(dataset=src)
        return inputs | index_inputs(model, self.moa["baselines"])

    # ---------------------------------------------------------------- Figure 4: batching

    @property
    def batching(self) -> Mapping[str, Any] | None:
        return self.moa.get("batching")

    def batching_inputs(self, wildcards: Any = None) -> dict[str, str]:
        """The target, the heads it batches, the requests' prompt file, the n-gram indexes."""
        b, model = self.batching, self.target
        bench = self.bench_inputs(SimpleNamespace(model=model))
        inputs = {"model": bench["model"], "prompts": bench[f"prompts_{b['set']}"]}
        inputs |= {f"head_{d}": bench[f"head_{d}"] for d in b["drafters"]}
        return inputs | index_inputs(model, b["baselines"])

    def batching_settings(self) -> dict[str, Any]:
        b = self.batching
        return {"drafters": list(b["drafters"]), "baselines": list(b["baselines"]),
                "bench": {**self.sets()[b["set"]], "n": b["n"]}, "new_tokens": b["new_tokens"],
                "slots": list(b["slots"]), "chain_k": self.moa["chain_k"],
                "decode": dict(self.spec.spec["decode"]),
                "max_support": self.spec.spec["index"]["max_support"]}  # fmt: skip

    def quality_inputs(self, wildcards: Any) -> dict[str, str]:
        """A model's decoding runs and the prompt files of the scored sets."""
        inputs = {"runs": paths.MOA_BENCH_RUNS.format(model=wildcards.model),
                  "model": paths.MODEL.format(model=wildcards.model)}  # fmt: skip
        bench = self.bench_inputs(wildcards)
        for name in dict.fromkeys(self.quality.values()):
            inputs[f"prompts_{name}"] = bench[f"prompts_{name}"]
        return inputs

    def sets(self, wildcards: Any = None) -> dict[str, dict[str, Any]]:
        """{set: its declaration with `name` and the `kind` of its prompt source}; on the alt
        target at most `alt.n` prompts per set."""
        alt = wildcards is not None and self.alt and wildcards.model == self.alt["target"]
        cap = self.alt.get("n") if alt else None
        out = {}
        for name, s in self.moa["sets"].items():
            src = s["prompts"]
            kind = "heldout" if src in self.spec.spec["heldout"] else None
            kind = kind or self.config["data"]["datasets"][src]["kind"]
            out[name] = {**s, "name": name, "kind": kind, "n": min(s["n"], cap or s["n"])}
        return out

    def bench_settings(self, wildcards: Any) -> dict[str, Any]:
        m, model = self.moa, wildcards.model
        ablation = self.ablation if model == self.target else {}
        return {"drafters": [d for d in self.drafters_of(model) if d in m["drafters"]],
                "ablations": [*(ablation.get("drafters") or {}),
                              *(self.repeat_runs() if ablation else [])],
                "ablation_set": ablation.get("set"), "baselines": list(m["baselines"]),
                "vocab_sweep": self.vocab_sweep if ablation else None,
                "chain_sets": m.get("chain_sets"),
                "chain_k": m["chain_k"], "tree": dict(m["tree"]) if m["tree"] else None,
                "max_new_tokens": m["max_new_tokens"], "baseline_repeats": m["baseline_repeats"],
                "decode": dict(self.spec.spec["decode"]),
                "max_support": self.spec.spec["index"]["max_support"],
                "unstable_spread": self.spec.spec["speed"]["unstable_spread"],
                "warmup_tokens": self.spec.spec["speed"]["warmup_tokens"]}  # fmt: skip

    # ---------------------------------------------------------------- report

    def report_items(self) -> list[ReportItem]:
        labels = {d: decl.get("label") or d for d, decl in self.declarations().items()}
        params = {"labels": labels, "sets": {n: s.get("label") or n
                                             for n, s in self.moa["sets"].items()},
                  "chain_k": self.moa["chain_k"], "tree": self.moa["tree"],
                  "ablation_set": self.ablation.get("set"), "models": self.models(),
                  "max_new_tokens": self.moa["max_new_tokens"],
                  "repeats": self.repeats}  # fmt: skip
        runs = {"summary": [self.outputs()[1]], "runs": [self.outputs()[0]]}
        measured = [(MEASURED, runs)]
        if self.quality:
            quality = {"summary": [self.quality_outputs()[1]], "runs": [self.outputs()[0]]}
            measured.append((QUALITY, quality))
        if self.alt:
            alt = self.outputs(self.alt["target"])
            measured.append((ALT, {"summary": [alt[1]], "runs": [alt[0]]}))
        items = []
        for group, inputs in measured:
            for stem, (renderer, label) in group.items():
                items.append(self._item(stem, f"moa:{renderer}",
                                        {**inputs, "paper": [self._paper(stem)]}, params,
                                        label))  # fmt: skip
        if self.vocab_sweep:
            items.append(self._item("moa_vocab_sweep", "moa:render_vocab_sweep", runs,
                                    {**params, "vocab_sweep": self.vocab_sweep},
                                    "drafting vocabulary sweep"))  # fmt: skip
        if self.batching:
            labels_of = {d: labels[d] for d in self.batching["drafters"]}
            items.append(ReportItem(
                rule="report_moa_figure_4", renderer="moa:render_figure_4",
                log=paths.REPORT_LOG.format(name="moa_figure_4"), category=CATEGORY,
                inputs={"runs": [paths.MOA_BATCHING.format(model=self.target)]},
                params={"labels": labels_of, "set": self.batching["set"]},
                outputs=figure_outputs("moa_figure_4", "Figure 4")
                | {"md": Output(paths.report("moa_figure_4", "md"))}, document="moa",
            ))  # fmt: skip
        for stem, label in TRANSCRIBED.items():
            items.append(self._item(stem, "tables:render_paper_only",
                                    {"paper": [self._paper(stem)]}, {}, label))  # fmt: skip
        return items

    def _paper(self, stem: str) -> str:
        return str(self.repo / paths.PAPER.format(name=stem))

    def _item(self, stem: str, renderer: str, inputs: dict[str, list[str]],
              params: dict[str, Any], label: str) -> ReportItem:  # fmt: skip
        return ReportItem(rule=f"report_{stem}", renderer=renderer,
                          log=paths.REPORT_LOG.format(name=stem),
                          category=CATEGORY, inputs=inputs, params=params,
                          outputs=table_outputs(stem, label=label), document="moa")  # fmt: skip
