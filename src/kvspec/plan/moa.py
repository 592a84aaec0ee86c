"""Document 002 (Mixture of Attentions): drafters trained against the target, then decoded
with chain and EAGLE-2 tree drafting on Spec-Bench-style prompt sets beside greedy decoding
and the n-gram methods, side by side in one job."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvspec.plan import paths
from kvspec.plan.items import ReportItem, table_outputs
from kvspec.spec.methods import INDEX_OF, METHOD_INPUTS

CATEGORY = "Mixture of Attentions drafters (document 002)"
HEAD = "results/moa/{model}/heads/{drafter}.pt"
BENCH_RUNS = "results/moa/{model}/bench.json"
BENCH_SUMMARY = "results/moa/{model}/bench.csv"
# report stem -> (renderer, label); tables 1 and 6 are the document's own (transcribed)
MEASURED = {
    "moa_table_2": ("render_table_2", "Table 2"),
    "moa_table_5": ("render_table_5", "Table 5"),
    "moa_table_10": ("render_table_10", "Table 10"),
}
TRANSCRIBED = {"moa_table_1": "Table 1", "moa_table_6": "Table 6"}


class MoAPlan:
    """Config block `moa`: one training job per (model, drafter), one decoding job per model."""

    def __init__(self, config: Mapping[str, Any], repo: Path, spec: Any) -> None:
        if spec is None:
            raise ValueError("config block 'moa' needs the spec block (its prompt sets)")
        self.config, self.repo, self.spec = config, repo, spec
        self.moa = config["moa"]
        self.target: str = self.moa["target"]
        self._check()

    def _check(self) -> None:
        from kvspec.config import ConfigError

        if self.target not in self.config["models"]:
            raise ConfigError(f"config key 'moa.target': {self.target!r} is not a key of models")
        unknown = set(self.moa["baselines"]) - set(METHOD_INPUTS)
        if unknown or "greedy" in self.moa["baselines"]:
            raise ConfigError(f"config key 'moa.baselines': {sorted(unknown) or ['greedy']} "
                              "(greedy is always run; others must be speed methods)")  # fmt: skip
        for name, s in self.moa["sets"].items():
            if s["prompts"] not in self.spec.spec["heldout"] | self.config["data"]["datasets"]:
                raise ConfigError(f"config key 'moa.sets.{name}.prompts': {s['prompts']!r} is "
                                  "neither a held-out split nor a dataset")  # fmt: skip

    # ---------------------------------------------------------------- jobs and their inputs

    def heads(self) -> list[str]:
        return [HEAD.format(model=self.target, drafter=d) for d in self.moa["drafters"]]

    def outputs(self) -> list[str]:
        return [BENCH_RUNS.format(model=self.target), BENCH_SUMMARY.format(model=self.target)]

    def train_inputs(self, wildcards: Any = None) -> dict[str, str]:
        return {"target": paths.MODEL.format(model=self.target),
                "responses": paths.RESPONSES.format(model=self.target)}  # fmt: skip

    def drafter(self, wildcards: Any) -> dict[str, Any]:
        """The declaration of the drafter a training job builds."""
        decl = self.moa["drafters"][wildcards.drafter]
        return {k: v for k, v in decl.items() if k != "label"}

    def bench_inputs(self, wildcards: Any = None) -> dict[str, str]:
        """The target, every head, every set's prompt file and the indexes the baselines read."""
        inputs = {"model": paths.MODEL.format(model=self.target)}
        for d in self.moa["drafters"]:
            inputs[f"head_{d}"] = HEAD.format(model=self.target, drafter=d)
        for name, s in self.moa["sets"].items():
            src = s["prompts"]
            held = src in self.spec.spec["heldout"]
            inputs[f"prompts_{name}"] = paths.PROMPTS if held else paths.DATA.format(dataset=src)
        needs = {n for m in self.moa["baselines"] for n in METHOD_INPUTS[m]}
        for name in sorted(needs & set(INDEX_OF)):
            corpus, fraction = INDEX_OF[name]
            index = paths.INDEX.format(model=self.target, corpus=corpus, fraction=fraction)
            inputs[name], inputs[f"{name}_stats"] = index, f"{index}.json"
        return inputs

    def sets(self, wildcards: Any = None) -> dict[str, dict[str, Any]]:
        """{set: its declaration with `name` and the `kind` of its prompt source}."""
        out = {}
        for name, s in self.moa["sets"].items():
            src = s["prompts"]
            kind = "heldout" if src in self.spec.spec["heldout"] else None
            kind = kind or self.config["data"]["datasets"][src]["kind"]
            out[name] = {**s, "name": name, "kind": kind}
        return out

    def bench_settings(self, wildcards: Any = None) -> dict[str, Any]:
        m = self.moa
        return {"drafters": list(m["drafters"]), "baselines": list(m["baselines"]),
                "chain_k": m["chain_k"], "tree": dict(m["tree"]) if m["tree"] else None,
                "max_new_tokens": m["max_new_tokens"], "baseline_repeats": m["baseline_repeats"],
                "decode": dict(self.spec.spec["decode"]),
                "max_support": self.spec.spec["index"]["max_support"]}  # fmt: skip

    # ---------------------------------------------------------------- report

    def report_items(self) -> list[ReportItem]:
        labels = {d: decl.get("label") or d for d, decl in self.moa["drafters"].items()}
        params = {"labels": labels, "sets": {n: s.get("label") or n
                                             for n, s in self.moa["sets"].items()},
                  "chain_k": self.moa["chain_k"], "tree": self.moa["tree"]}  # fmt: skip
        items = []
        for stem, (renderer, label) in MEASURED.items():
            items.append(self._item(stem, f"moa:{renderer}",
                                    {"summary": [self.outputs()[1]], "runs": [self.outputs()[0]],
                                     "paper": [self._paper(stem)]}, params, label))  # fmt: skip
        for stem, label in TRANSCRIBED.items():
            items.append(self._item(stem, "tables:render_paper_only",
                                    {"paper": [self._paper(stem)]}, {}, label))  # fmt: skip
        return items

    def _paper(self, stem: str) -> str:
        return str(self.repo / paths.PAPER.format(name=stem))

    def _item(self, stem: str, renderer: str, inputs: dict[str, list[str]],
              params: dict[str, Any], label: str) -> ReportItem:  # fmt: skip
        return ReportItem(rule=f"report_{stem}", renderer=renderer, log=f"logs/report/{stem}.log",
                          category=CATEGORY, inputs=inputs, params=params,
                          outputs=table_outputs(stem, label=label), document="moa")  # fmt: skip
