"""Document 002's client-server experiments (Tables 3, 4, 7): one job per trained head of the
moa stage, running a real server process for moa.target and the client over the loopback
(`kvspec.remote.stage`); three report items read every job's runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvspec.plan import paths
from kvspec.plan.items import ReportItem, table_outputs

CATEGORY = "Client-server speculative decoding (document 002)"
# report stem -> (renderer, label)
TABLES = {
    "moa_table_3": ("render_table_3", "Table 3"),
    "moa_table_4": ("render_table_4", "Table 4"),
    "moa_table_7": ("render_table_7", "Table 7"),
}


class RemotePlan:
    """Config block `remote`: one client-server job per named head of moa.drafters."""

    def __init__(self, config: Mapping[str, Any], repo: Path, moa: Any) -> None:
        self.config, self.repo, self.moa = config, repo, moa
        self.remote = config["remote"]
        self.model: str = moa.target

    def drafters(self) -> list[str]:
        return list(self.remote["drafters"])

    def outputs(self) -> list[str]:
        return [paths.REMOTE_RUNS.format(model=self.model, drafter=d) for d in self.drafters()]

    def run_inputs(self, wildcards: Any) -> dict[str, str]:
        """The target, the head and the HumanEval set's prompt file."""
        bench = self.moa.bench_inputs(wildcards)
        return {"model": paths.MODEL.format(model=wildcards.model),
                "head": bench[f"head_{wildcards.drafter}"],
                "prompts": bench[f"prompts_{self.remote['set']}"]}  # fmt: skip

    def settings(self, wildcards: Any = None) -> dict[str, Any]:
        """What every job of the stage shares (the set's declaration capped at remote.n)."""
        r, m = self.remote, self.moa.moa
        bench = dict(self.moa.sets()[r["set"]])
        bench["n"] = min(bench["n"], r["n"] or bench["n"])
        return {"bench": bench, "profiles": list(r["profiles"]), "cuts": list(r["cuts"]),
                "chain_k": m["chain_k"], "tree": dict(m["tree"]) if m["tree"] else None,
                "max_new_tokens": r["max_new_tokens"], "timeout_s": r["timeout_s"],
                "humaneval_timeout_s": r["humaneval_timeout_s"]}  # fmt: skip

    def report_items(self) -> list[ReportItem]:
        decl = self.moa.declarations()
        params = {"labels": {d: decl[d].get("label") or d for d in self.drafters()},
                  "drafters": self.drafters(), **self.settings()}  # fmt: skip
        items = []
        for stem, (renderer, label) in TABLES.items():
            inputs = {"runs": self.outputs(),
                      "paper": [str(self.repo / paths.PAPER.format(name=stem))]}  # fmt: skip
            items.append(ReportItem(rule=f"report_{stem}", renderer=f"remote:{renderer}",
                                    log=paths.REPORT_LOG.format(name=stem), category=CATEGORY,
                                    inputs=inputs, params=params, document="moa",
                                    outputs=table_outputs(stem, label=label)))  # fmt: skip
        return items
