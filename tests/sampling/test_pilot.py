"""Document 004's pilot through its stage entry point: every sample on its own "pilot" stream,
selection by passes in HumanEval order, a killed run resumed to the uninterrupted one's output,
and the HumanEval stage's problems read from the selection."""

import json

import pytest

from kvspec.decoding.warp import sample_generate
from kvspec.io import read_json
from kvspec.sampling import pilot as pilot_mod
from kvspec.sampling import stages
from kvspec.seeds import derive
from tests.sampling.test_stages import CharTokenizer
from tests.tiny import tiny_llama

SETTINGS = {"problems": 3, "samples": 3, "min_passes": 2, "max_new_tokens": 6,
            "temperature": 1.0, "top_p": 0.9, "timeout": 5}  # fmt: skip
PASSES = {"HumanEval/0": 2, "HumanEval/1": 0, "HumanEval/2": 3, "HumanEval/3": 3}


class Judge:
    """Stands in for the sandboxed runner: passes a fixed number of each task's samples and
    keeps what it was asked to judge; `fail_at` raises on that task (a killed job)."""

    def __init__(self, fail_at: str | None = None) -> None:
        self.seen: dict[str, list[str]] = {}
        self.fail_at = fail_at

    def __call__(self, samples, ks, problems, **kw):
        ((task, texts),) = samples.items()
        if task == self.fail_at:
            raise KeyboardInterrupt
        self.seen[task] = texts
        return {"per_task": {task: {"n": len(texts), "c": PASSES[task]}}}


@pytest.fixture
def setup(tmp_path, monkeypatch):
    model = tiny_llama(3, vocab=128)
    monkeypatch.setattr(pilot_mod, "load_model", lambda *a, **k: (model, None))
    monkeypatch.setattr(pilot_mod, "tokenizer_of", lambda _: CharTokenizer())
    monkeypatch.setattr(pilot_mod, "stop_ids", lambda *a: [])
    problems = tmp_path / "he.jsonl"
    problems.write_text("".join(
        json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n"}) + "\n"
        for i in range(4)))  # fmt: skip
    return model, problems, tmp_path


def _run(problems, out, state, judge, monkeypatch):
    import kvspec.eval.humaneval as he

    monkeypatch.setattr(he, "score", judge)
    pilot_mod.pilot_stage("model", str(problems), str(out), settings=SETTINGS,
                          prompt_format="completion", sandbox={"filesystem": "optional"},
                          seed=7, device="cpu", dtype="float64", linear="torch", threads=1,
                          checkpoint=str(state))  # fmt: skip


def test_pilot_samples_on_its_own_streams_and_selects_by_passes(setup, monkeypatch) -> None:
    model, problems, tmp = setup
    judge = Judge()
    _run(problems, tmp / "pilot.json", tmp / "state.jsonl", judge, monkeypatch)
    out = read_json(tmp / "pilot.json")
    assert [t["task_id"] for t in out["tasks"]] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert out["selected"] == ["HumanEval/0", "HumanEval/2"]  # 2 and 3 passes of 3; /3 untried
    tok = CharTokenizer()
    for p in range(3):  # each sample is the one-row sampler's on derive(seed, "pilot", p, c)
        prompt = tok.encode(f"def f{p}(x):\n")
        alone = [sample_generate(model, prompt, 6, temperature=1.0, top_p=0.9,
                                 seed=derive(7, "pilot", p, c))[0] for c in range(3)]  # fmt: skip
        assert judge.seen[f"HumanEval/{p}"] == [
            stages.completion_text(tok, a, "completion") for a in alone
        ]
    assert not (tmp / "state.jsonl").exists()


def test_a_killed_pilot_resumes_without_redoing_finished_problems(setup, monkeypatch) -> None:
    _, problems, tmp = setup
    whole = Judge()
    _run(problems, tmp / "whole.json", tmp / "a.jsonl", whole, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _run(problems, tmp / "cut.json", tmp / "b.jsonl", Judge(fail_at="HumanEval/2"),
             monkeypatch)  # fmt: skip
    rest = Judge()
    _run(problems, tmp / "cut.json", tmp / "b.jsonl", rest, monkeypatch)
    assert list(rest.seen) == ["HumanEval/2"]
    a, b = read_json(tmp / "whole.json"), read_json(tmp / "cut.json")
    assert a["selected"] == b["selected"]
    assert [t["passes"] for t in a["tasks"]] == [t["passes"] for t in b["tasks"]]


def test_humaneval_problems_follow_the_pilot(setup) -> None:
    _, problems, tmp = setup
    pilot = tmp / "pilot.json"
    pilot.write_text(json.dumps({"selected": ["HumanEval/2", "HumanEval/0"], "tasks": []}))
    chosen = stages.chosen_problems(str(problems), {"problems": "pilot", "task_ids": ["x"]},
                                    str(pilot))  # fmt: skip
    assert [r["task_id"] for r in chosen] == ["HumanEval/2", "HumanEval/0"]
    pilot.write_text(json.dumps({"selected": [], "tasks": []}))
    with pytest.raises(ValueError, match="selected no HumanEval problem"):
        stages.chosen_problems(str(problems), {"problems": "pilot"}, str(pilot))
    with pytest.raises(ValueError, match="need the pilot's result"):
        stages.chosen_problems(str(problems), {"problems": "pilot"})
