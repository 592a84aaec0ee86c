"""Document 004's pilot through its stage entry point: every sample on its own "pilot" stream,
selection by passes in HumanEval order, a killed run resumed to the uninterrupted one's output,
and the HumanEval stage's problems read from the selection; its classical job's batches are the
one-row samples, resumed from a partial journal."""

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


HUMANEVAL = {"problems": 2, "completions": 4, "max_new_tokens": 6, "temperature": 1.0,
             "top_p": 0.9, "ks": [1], "timeout": 5, "prompt_format": "completion"}  # fmt: skip


def _humaneval(problems, out, state, monkeypatch, model):
    """`humaneval_stage` as the rule calls it, on a tiny model; the verdicts faked."""
    import kvspec.eval.humaneval as he

    monkeypatch.setattr(stages, "load_model", lambda *a, **k: (model, None))
    monkeypatch.setattr(stages, "tokenizer_of", lambda _: CharTokenizer())
    monkeypatch.setattr(stages, "stop_ids", lambda *a: [])

    def verdicts(samples, ks, tasks, **kw):
        per_task = {t: {"n": len(s), "c": 0, "pass@1": 0.0} for t, s in samples.items()}
        return {"pass@k": {"pass@1": 0.0}, "isolation": "faked", "per_task": per_task}

    monkeypatch.setattr(he, "score", verdicts)
    stages.humaneval_stage({"m": "m"}, str(problems), str(out), target="m", label="classical",
                           method={"kind": "classical"}, settings=HUMANEVAL,
                           sandbox={"filesystem": "optional"}, seed=11, device="cpu",
                           dtype="float64", linear="torch", threads=1,
                           checkpoint=str(state))  # fmt: skip
    return read_json(out)["runs"]


def test_humaneval_classical_batches_are_the_one_row_samples_and_resume(setup, monkeypatch):
    """The classical job decodes a problem's completions as one batch: each run is the
    one-row sampler's sample of its own seed, and a journal holding part of a problem's
    samples is resumed with only the missing ones decoded, to the uninterrupted output."""
    from kvspec.sampling.methods import Settings, make_sampler

    model, problems, tmp = setup
    runs = _humaneval(problems, tmp / "a.json", tmp / "a.jsonl", monkeypatch, model)
    one = make_sampler("classical", {"target": model}, Settings(6, 1.0, 0.9))
    tok = CharTokenizer()
    for r in runs:
        p, c = r["sample"]
        alone = one(tok.encode(f"def f{p}(x):\n"), derive(11, "humaneval", p, c)).tokens
        assert r["completion"] == stages.completion_text(tok, alone, "completion")
        assert r["batch"] == 4 and r["tokens"] == len(alone)
    assert len({r["completion"] for r in runs}) > 2
    kept = [dict(r, completion="from the journal") for r in runs[1:3]]
    (tmp / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    resumed = _humaneval(problems, tmp / "b.json", tmp / "b.jsonl", monkeypatch, model)
    assert [r["completion"] for r in resumed[1:3]] == ["from the journal"] * 2
    assert [r["completion"] for r in resumed[:1] + resumed[3:]] == [
        r["completion"] for r in runs[:1] + runs[3:]
    ]
    assert resumed[0]["batch"] == 2 and resumed[4]["batch"] == 4
