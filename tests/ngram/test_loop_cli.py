"""The loop check's sets (prompts Table 4.7 does not time) and its paired report."""

from __future__ import annotations

import json

import pytest

from kvspec.ngram.loop_cli import check_config, report, timed_prompts
from kvspec.ngram.replay_cli import read_config
from kvspec.plan import REPO


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """A workflow directory with 5 held-out python prompts and 12 HumanEval problems."""
    (tmp_path / "results/generate").mkdir(parents=True)
    (tmp_path / "results/data").mkdir(parents=True)
    prompts = [{"id": f"p{i}", "split": "python", "prompt": "x"} for i in range(5)]
    prompts += [{"id": "g0", "split": "general", "prompt": "y"}]
    (tmp_path / "results/generate/prompts.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in prompts)
    )
    (tmp_path / "results/data/humaneval.jsonl").write_text(
        "".join(json.dumps({"task_id": f"HumanEval/{i}", "prompt": "def f():"}) + "\n"
                for i in range(12))
    )  # fmt: skip
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_sets_take_the_prompts_after_table_4_7s(workdir):
    config = read_config(REPO / "config/ci.yaml")  # Table 4.7: humaneval 3, python 2
    out = check_config(config, "target", ["humaneval", "python"], 10, ["sd_suffix_decoding"])
    speed = out["spec"]["speed"]
    assert speed["sets"]["checkhumaneval"] == {"prompts": "humaneval", "n": 7, "skip": 3,
                                               "label": None}  # fmt: skip
    assert speed["sets"]["checkpython"] == {"prompts": "python", "n": 3, "skip": 2, "label": None}
    assert speed["runs"]["target"] == {"sets": ["checkhumaneval", "checkpython"],
                                       "methods": ["greedy", "sd_suffix_decoding"]}  # fmt: skip
    assert config["spec"]["speed"]["runs"]["target"]["sets"] == ["humaneval", "python"]  # kept
    assert timed_prompts(speed, "target", "general") == 0  # not in Table 4.7: from the first


def test_sets_need_prompts_left_and_methods_beside_greedy(workdir):
    config = read_config(REPO / "config/ci.yaml")
    with pytest.raises(SystemExit, match="general: 1 prompts"):
        check_config(config, "target", ["general"], 40, ["sd_suffix_decoding"])
    with pytest.raises(SystemExit, match="humaneval: 1 prompts after the 3"):
        check_config(config, "target", ["humaneval"], 4, ["sd_suffix_decoding"])
    with pytest.raises(SystemExit, match="beside greedy"):
        check_config(config, "target", ["python"], 40, ["greedy", "sd_suffix_decoding"])
    with pytest.raises(SystemExit, match="neither"):
        check_config(config, "target", ["nosuchset"], 40, ["sd_suffix_decoding"])
    (workdir / "results/data/humaneval.jsonl").unlink()
    with pytest.raises(SystemExit, match="missing: results/data/humaneval.jsonl"):
        check_config(config, "target", ["humaneval"], 40, ["sd_suffix_decoding"])


def test_report_prints_the_ranking_rows():
    records = [
        {"method": m, "prompt": "a", "tokens": [1] * 10, "seconds": t, "forwards": f,
         "exact": True} for m, t, f in (("greedy", 1.0, 10), ("ours", 0.4, 4), ("ref", 0.5, 5))
    ]  # fmt: skip
    text = report(records, "set", "ref")
    assert text.splitlines()[0] == "set: 1 prompts"
    assert "ours                         2.500x greedy, 2.50 tokens a forward, / ref 1.250" in text
    assert "; 1 of 1 runs equal to greedy" in text
