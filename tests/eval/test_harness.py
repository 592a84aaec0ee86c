"""lm-eval wrapper on a tiny random model with the local task YAMLs and fixture data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from kvspec.eval.harness import TaskSpec, _seeded_samples, evaluate, local_task
from kvspec.models.build import build_model
from kvspec.models.tokenizer import train_tokenizer

from ..conftest import REPO

TASK_DIR = REPO / "config" / "lm_eval_tasks"
ARCH = {"family": "llama", "hidden": 32, "intermediate": 64, "layers": 2, "heads": 4,
        "kv_heads": 2, "max_position": 256}  # fmt: skip
TEXT = "the cat sat on the mat . the dog ran to the park and the bird sang in a tree"


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tiny() -> tuple[torch.nn.Module, object]:
    tok = train_tokenizer([TEXT] * 20, 300, 128)
    return build_model(ARCH, tok, seed=0).eval(), tok


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("harness_data")
    mc = [
        {"id": str(i), "query": f"Question: where did the cat sit {i}?\nAnswer:",
         "choices": ["on the mat", "in a tree", "at the park"], "gold": i % 3}
        for i in range(8)
    ]  # fmt: skip
    mmlu = [
        {"id": str(i), "query": "Which animal ran?\nA. cat\nB. dog\nAnswer:",
         "choices": [" A", " B"], "gold": 1, "subject": "zoo"}
        for i in range(4)
    ]  # fmt: skip
    wino = [
        {"id": str(i), "query": "", "choices": ["the cat sat", "the dog sat"], "gold": i % 2,
         "continuation": "on the mat ."}
        for i in range(4)
    ]  # fmt: skip
    text = [{"id": "0", "text": TEXT}, {"id": "1", "text": TEXT[::-1]}]
    return {
        "mc": _write(d / "mc.jsonl", mc),
        "mmlu": _write(d / "mmlu.jsonl", mmlu),
        "wino": _write(d / "wino.jsonl", wino),
        "text": _write(d / "text.jsonl", text),
    }


def _specs(data: dict[str, Path]) -> dict[str, TaskSpec]:
    return {
        "arc": TaskSpec("acc", "kvspec_arc_challenge", str(data["mc"]), limit=5),
        "mmlu": TaskSpec("acc", "kvspec_mmlu", str(data["mmlu"])),
        "wg": TaskSpec("acc", "kvspec_winogrande", str(data["wino"])),
        "wiki": TaskSpec("word_perplexity", "kvspec_wikitext2", str(data["text"]), limit=1),
    }


def test_every_column_scored_within_limits(tiny, data) -> None:
    model, tok = tiny
    out = evaluate(model, tok, _specs(data), TASK_DIR, batch_size=4, seed=0)
    assert set(out) == {"arc", "mmlu", "wg", "wiki"}
    assert [out[c]["n"] for c in ("arc", "mmlu", "wg", "wiki")] == [5, 4, 4, 1]
    for col in ("arc", "mmlu", "wg"):
        assert 0.0 <= out[col]["value"] <= 1.0
    assert out["mmlu"]["value"] in (0.0, 1.0)  # four identical questions: all right or all wrong
    assert math.isfinite(out["wiki"]["value"]) and out["wiki"]["value"] > 1.0
    for col in ("arc", "mmlu", "wg"):  # per-document scores average to the reported value
        per_doc = out[col]["per_doc"]
        assert len(per_doc) == out[col]["n"] and set(per_doc.values()) <= {0.0, 1.0}
        assert sum(per_doc.values()) / len(per_doc) == pytest.approx(out[col]["value"])
    assert out["wiki"]["per_doc"] is None  # perplexity aggregates, no per-document number
    again = evaluate(model, tok, _specs(data), TASK_DIR, batch_size=2, seed=0)
    assert {c: r["value"] for c, r in again.items()} == pytest.approx(
        {c: r["value"] for c, r in out.items()}, rel=1e-4
    )


def test_word_perplexity_matches_manual_rolling_loglikelihood(tiny, data) -> None:
    """One short document = one window: lm-eval scores every token after the BOS prefix."""
    model, tok = tiny
    wikitext_target = local_task(TASK_DIR, "kvspec_wikitext2", data["text"])["doc_to_target"]
    spec = {"wiki": TaskSpec("word_perplexity", "kvspec_wikitext2", str(data["text"]), limit=2)}
    got = evaluate(model, tok, spec, TASK_DIR, batch_size=2)["wiki"]["value"]
    total_ll, words = 0.0, 0
    for doc in ({"text": TEXT}, {"text": TEXT[::-1]}):
        target = wikitext_target(doc)
        ids = [tok.bos_token_id, *tok(target, add_special_tokens=False)["input_ids"]]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
        total_ll += float(logp[:-1].gather(1, torch.tensor(ids[1:])[:, None]).sum())
        words += len(target.split())
    assert got == pytest.approx(math.exp(-total_ll / words), rel=1e-4)


def test_winogrande_scores_continuation_after_each_context(data) -> None:
    from lm_eval.tasks import TaskManager

    cfg = local_task(TASK_DIR, "kvspec_winogrande", data["wino"])
    task = TaskManager(include_path=str(TASK_DIR), include_defaults=False).load([cfg])
    task = task["tasks"]["kvspec_winogrande"]
    doc = task.eval_docs[1]
    assert task.multiple_input == 2  # contexts are the choices, as in lm-eval's winogrande
    assert task.doc_to_text(doc) == 1
    assert task.doc_to_choice(doc) == ["the cat sat", "the dog sat"]
    assert task.doc_to_target(doc) == "on the mat ."


def test_local_task_uses_absolute_data_path(data) -> None:
    cfg = local_task(TASK_DIR, "kvspec_mmlu", data["mmlu"])
    path = cfg["dataset_kwargs"]["data_files"]["test"]
    assert Path(path).is_absolute() and Path(path) == data["mmlu"].resolve()
    assert cfg["target_delimiter"] == ""  # choices carry their own leading space
    with pytest.raises(FileNotFoundError, match="does not exist"):
        local_task(TASK_DIR, "kvspec_mmlu", data["mmlu"].parent / "missing.jsonl")
    with pytest.raises(FileNotFoundError, match="no task template"):
        local_task(TASK_DIR, "kvspec_nonexistent", data["mmlu"])


def test_seeded_samples_spread_and_repeat() -> None:
    class Docs:
        def __init__(self, n: int) -> None:
            self.eval_docs = list(range(n))

    tasks = {"a": Docs(100), "b": Docs(3)}
    first = _seeded_samples(tasks, 10, seed=0)
    assert first == _seeded_samples(tasks, 10, seed=0)
    assert first["a"] != _seeded_samples(tasks, 10, seed=1)["a"]
    assert len(first["a"]) == 10 and max(first["a"]) > 10  # not simply the first documents
    assert first["b"] == [0, 1, 2]
    assert _seeded_samples(tasks, None, seed=0)["a"] == list(range(100))


def test_bad_specs_raise(tiny) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        TaskSpec("acc", template="kvspec_mmlu", lm_eval="mmlu", data="x")
    with pytest.raises(ValueError, match="data file"):
        TaskSpec("acc", template="kvspec_mmlu")
    with pytest.raises(ValueError, match="no tasks"):
        evaluate(*tiny, {}, TASK_DIR)


def test_max_words_caps_perplexity_documents(tiny, data) -> None:
    model, tok = tiny
    capped = TaskSpec("word_perplexity", "kvspec_wikitext2", str(data["text"]), max_words=5)
    full = TaskSpec("word_perplexity", "kvspec_wikitext2", str(data["text"]))
    cfg = local_task(TASK_DIR, "kvspec_wikitext2", data["text"], max_words=5)
    from datasets import Dataset

    docs = cfg["process_docs"](Dataset.from_list([{"id": "0", "text": TEXT}]))
    assert docs[0]["text"] == "the cat sat on the"
    a = evaluate(model, tok, {"wiki": capped}, TASK_DIR, batch_size=2)["wiki"]["value"]
    b = evaluate(model, tok, {"wiki": full}, TASK_DIR, batch_size=2)["wiki"]["value"]
    assert math.isfinite(a) and a != pytest.approx(b)
    with pytest.raises(ValueError, match="max_words"):
        TaskSpec("word_perplexity", lm_eval="wikitext", max_words=5)
