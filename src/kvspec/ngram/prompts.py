"""The SFT prompts of the speculative-decoding study, split into index and held-out sets.

Every prompt gets a `split`: "index" (its responses may enter an n-gram index) or the name
of a held-out set (used only for acceptance analysis and speed benchmarks, never indexed).
Index prompts carry a seeded `rank`; the index of fraction f holds the prompts with
rank < f * n, so the size sweep of thesis Table 4.1 is nested (each index contains the
smaller ones), like the paper's 50k ... 5M examples.

A prompt text enters once (its first record, in source order; whitespace-normalised): the
SFT datasets repeat some (ShareGPT's identity chats hold "What is up?" 21 times), and a
held-out prompt whose text is also indexed would find its own greedy response in the index.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# A prompt is "Python coding" when it names Python or its reference answer looks like Python.
_PYTHON_NAMED = re.compile(r"\bpython\b", re.I)
_PYTHON_CODE = re.compile(r"^\s*(def |class |import |from \S+ import )|\bprint\(", re.M)
_OTHER_LANGS = re.compile(
    r"\b(java|javascript|c\+\+|c#|sql|html|css|php|ruby|swift|rust|golang|bash|r)\b", re.I
)


def is_python(prompt: str, response: str) -> bool:
    """Does this instruction ask for Python code (named, or answered with Python code)?"""
    if _PYTHON_NAMED.search(prompt):
        return True
    return bool(_PYTHON_CODE.search(response)) and not _OTHER_LANGS.search(prompt)


def select_prompts(
    sources: Mapping[str, Sequence[Mapping[str, Any]]],
    heldout: Mapping[str, Mapping[str, Any]],
    seed: int,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Prompt records {id, source, prompt, sft_response, python, split, rank} of the study.

    `sources` maps a dataset name to its instruction records ({id, prompt, response}).
    `heldout` maps a set name to {sources: [...], n: int, python_only: bool}; sets are
    drawn in order, disjointly, before the rest become index prompts; no two records share
    a prompt text (`distinct_prompts`). `limit` keeps only that many index prompts (a seeded
    choice). Raises ValueError if a set cannot be filled.
    """
    rng = np.random.default_rng(seed)
    pool = [_record(name, rec) for name, recs in sources.items() for rec in recs]
    _check_unique(pool)
    pool = distinct_prompts(pool)
    taken: set[str] = set()
    for set_name, spec in heldout.items():
        for rec in _draw_heldout(pool, taken, set_name, spec, rng):
            rec["split"] = set_name
            taken.add(rec["id"])
    index = [r for r in pool if r["id"] not in taken]
    order = rng.permutation(len(index))
    for rank, i in enumerate(order):
        index[i]["rank"] = rank
    if limit is not None:
        index = [r for r in index if r["rank"] < limit]
    return [r for r in pool if r["id"] in taken] + sorted(index, key=lambda r: r["rank"])


def _record(source: str, rec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": f"{source}/{rec['id']}",
        "source": source,
        "prompt": rec["prompt"],
        "sft_response": rec["response"],
        "python": is_python(rec["prompt"], rec["response"]),
        "split": "index",
        "rank": None,
    }


def prompt_key(prompt: str) -> str:
    """A prompt's text with its whitespace normalised: two prompts are one if keys match."""
    return " ".join(str(prompt).split())


def distinct_prompts(pool: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first record of each prompt text (`prompt_key`), in pool order."""
    seen: set[str] = set()
    kept = []
    for rec in pool:
        text = prompt_key(rec["prompt"])
        if text not in seen:
            seen.add(text)
            kept.append(rec)
    return kept


def _check_unique(pool: list[dict[str, Any]]) -> None:
    ids = [r["id"] for r in pool]
    if len(set(ids)) != len(ids):
        raise ValueError("prompt ids are not unique within their datasets")


def _draw_heldout(
    pool: list[dict[str, Any]],
    taken: set[str],
    name: str,
    spec: Mapping[str, Any],
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """A seeded sample of `spec['n']` untaken prompts from the set's sources (and filter)."""
    eligible = [
        r
        for r in pool
        if r["source"] in spec["sources"]
        and r["id"] not in taken
        and (r["python"] or not spec.get("python_only", False))
    ]
    if len(eligible) < spec["n"]:
        raise ValueError(
            f"held-out set {name!r} wants {spec['n']} prompts but only {len(eligible)} "
            f"are eligible in {list(spec['sources'])}"
        )
    picks = rng.choice(len(eligible), size=spec["n"], replace=False)
    return [eligible[i] for i in sorted(picks)]


def index_prompts(prompts: Sequence[Mapping[str, Any]], fraction: float) -> list[Mapping[str, Any]]:
    """Index prompts of the nested fraction `fraction` (rank < fraction * n_index)."""
    index = [p for p in prompts if p["split"] == "index"]
    cut = round(fraction * len(index))
    return [p for p in index if p["rank"] < cut]
