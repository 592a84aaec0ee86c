"""Benchmark prompt sets: the first n prompts of a set, chat-formatted into token ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvspec.decoding.generate import prompt_ids


def bench_prompts(
    records: Sequence[Mapping[str, Any]], bench: Mapping[str, Any], tokenizer: Any
) -> list[tuple[str, list[int]]]:
    """`bench['n']` prompts of a benchmark set as (id, chat-formatted ids): the first ones, or
    those after the first `bench['skip']` (prompts another set times, e.g. Table 4.7's).

    `bench['kind']` is "heldout" (prompt records of that split), "code" (HumanEval: the
    function stub is the user turn), "math" (the problem is the user turn) or "prompt"
    (e.g. Spec-Bench: records of `bench['categories']`, taken in turn from each category).
    """
    kind, src = bench["kind"], bench["prompts"]
    if kind == "heldout":
        texts = [(r["id"], r["prompt"]) for r in records if r["split"] == src]
    elif kind == "code":
        texts = [(r["task_id"], r["prompt"]) for r in records]
    elif kind == "math":
        texts = [(r["id"], r["problem"]) for r in records]
    elif kind == "prompt":
        texts = _by_category(records, bench.get("categories"))
    else:
        raise ValueError(f"benchmark {bench['name']!r}: unsupported prompt kind {kind!r}")
    skip = bench.get("skip", 0)
    if len(texts) < skip + bench["n"]:
        after = f" after the first {skip}" if skip else ""
        raise ValueError(
            f"benchmark {bench['name']!r} wants {bench['n']} prompts{after}, {src!r} has "
            f"{len(texts)}"
        )
    return [(pid, prompt_ids(tokenizer, text)) for pid, text in texts[skip : skip + bench["n"]]]


def _by_category(
    records: Sequence[Mapping[str, Any]], categories: Sequence[str] | None
) -> list[tuple[str, str]]:
    """(id, prompt) of the records of `categories` (all when None), round-robin over them."""
    cats = list(categories) if categories else list(dict.fromkeys(r["category"] for r in records))
    queues = [[(r["id"], r["prompt"]) for r in records if r["category"] == c] for c in cats]
    missing = [c for c, q in zip(cats, queues, strict=True) if not q]
    if missing:
        raise ValueError(f"no prompt records of the categories {missing}")
    return [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]
