"""The remote stage's pieces on tiny models: a server process started by the stage's helper,
profile and cut runs, HumanEval scoring in the sandbox, and Tables 3, 4, 7 rendered from a
job's runs (message sizes exactly formula + framing)."""

from __future__ import annotations

import pandas as pd

from kvspec.eval.humaneval import load_problems
from kvspec.neural.heads import load_head
from kvspec.remote.stage import _score, _Settings, start_server
from kvspec.report import remote as report
from tests.remote.test_client_server import HEADS, TREE, head_files, target_dir  # noqa: F401
from tests.tiny import tree_llama

PAPER = "config/paper_results/moa_table_{}.csv"


class _Tokenizer:
    def decode(self, tokens, skip_special_tokens=True):  # an answer that passes HumanEval/0
        return (
            "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) "
            "for b in numbers[i + 1:])\n"
            if len(tokens) > 3
            else "    pass\n"
        )


def test_a_job_runs_scores_and_renders(target_dir, head_files, tmp_path) -> None:  # noqa: F811
    target = tree_llama(0, layers=3)
    head, decl = load_head(head_files["moa1"], target)
    proc, address = start_server(target_dir, {"moa1": head_files["moa1"]}, "float64",
                                 str(tmp_path))  # fmt: skip
    problem = load_problems()["HumanEval/0"]
    prompt = [3, 17, 5, 9, 21, 8]
    settings = _Settings(target, head, decl, "moa1", 3, TREE, 12, [], 30.0, 0)
    try:
        runs = [
            {
                "prompt": "HumanEval/0",
                "profile": prof,
                "cut": None,
                **settings.run(address, prompt, prof, None),
            }
            for prof in ("5G", "4G")
        ]
        runs += [{"prompt": "HumanEval/0", "profile": "none", "cut": b,
                  **settings.run(address, prompt, "none", b)} for b in (1, 4)]  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
    assert [r["verified"] for r in runs[2:]] == [1, 4] and runs[0]["tokens"] == runs[1]["tokens"]
    _score(runs, [problem], _Tokenizer(), [1, 4], 10.0, require_fs=True)
    assert [r["passed"] for r in runs] == [1.0, 1.0, 1.0, 1.0]
    assert [r["lower_bound_passed"] for r in runs[2:]] == [0.0, 1.0]
    job = {"runs": runs, "head": {"trainable_parameters": 1000},
           "meta": {"drafter": "moa1", "declaration": decl, "profiles": ["5G", "4G"],
                    "dims": settings.dims()}}  # fmt: skip
    item = {"labels": {"moa1": "Ours (TLI=1)"}, "cuts": [1, 4]}
    t3 = report.table_3([job], item, PAPER.format(3))
    ours = t3[t3["drafter"] == "Ours (TLI=1)"].iloc[0]
    assert ours["tps_5g (ours)"] > 0 and ours["tps_4g (ours)"] > 0
    assert ours["calls_large (ours)"] == runs[0]["calls"] and ours["tps_5g (paper)"] == 30.6
    t4 = report.table_4([job], item, PAPER.format(4))
    bound = t4[t4["scenario"] == "stop_no_local_model"].iloc[0]
    assert bound["b_1 (ours)"] == 0.0 and bound["b_4 (ours)"] == 100.0
    assert bound["b_10 (paper)"] == 5.59
    t7 = report.table_7([job], item, PAPER.format(7))
    row = t7[t7["head"] == "Ours (TLI=1)"].iloc[0]
    assert row["drafter"] == "Ours" and bool(row["exact"]) and row["TLI"] == 1
    assert row["sent_by_server_bytes"] == "3A + 2AE_kv(TLI + 1)"
    assert isinstance(t7, pd.DataFrame) and row["server_bytes"] > row["server_formula"]
