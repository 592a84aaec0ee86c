"""The normalized record schema of each dataset kind, and JSONL reading/writing."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kvspec.io import atomic_path

# Required fields and their types, per kind. Extra fields (e.g. `subject`) are allowed.
SCHEMAS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "text": {"id": str, "text": str},
    "instruction": {"id": str, "prompt": str, "response": str},
    "prompt": {"id": str, "prompt": str, "category": str},  # prompts without a reference
    "multiple_choice": {"id": str, "query": str, "choices": list, "gold": int},
    "code": {
        "task_id": str,
        "prompt": str,
        "entry_point": str,
        "canonical_solution": str,
        "test": str,
    },
    "math": {"id": str, "problem": str, "solution": str, "answer": str},
}


class DataError(ValueError):
    """A data file is missing, empty or malformed; the message names the file (and line)."""


def check_record(record: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    """Return `record` if it has every field of `kind` with the right type, else raise."""
    if kind not in SCHEMAS:
        raise DataError(f"{where}: unknown dataset kind {kind!r} (known: {sorted(SCHEMAS)})")
    for field, typ in SCHEMAS[kind].items():
        if field not in record:
            raise DataError(f"{where}: missing field {field!r} for kind {kind!r}")
        if not isinstance(record[field], typ) or isinstance(record[field], bool):
            raise DataError(
                f"{where}: field {field!r} should be {typ}, got {type(record[field]).__name__}"
            )
    if kind == "multiple_choice" and not 0 <= record["gold"] < len(record["choices"]):
        raise DataError(
            f"{where}: gold index {record['gold']} outside {len(record['choices'])} choices"
        )
    return record


def write_jsonl(
    path: str | Path, records: Iterable[dict[str, Any]], kind: str | None = None
) -> int:
    """Write `records` atomically (each checked against `kind` when given); return how many."""
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        for n, rec in enumerate(records, start=1):
            if kind is not None:
                check_record(rec, kind, f"{path} record {n}")
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    if n == 0 and kind is not None:  # a dataset with no records is an error; a shard may be empty
        Path(path).unlink(missing_ok=True)
        raise DataError(f"{path}: no records to write")
    return n


def iter_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield JSON objects from a JSONL file, naming file and line on any malformed line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    empty = True
    with open(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{path}:{lineno}: malformed JSON ({err.msg})") from err
            if not isinstance(obj, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object")
            empty = False
            yield obj
    if empty:
        raise DataError(f"{path}: file is empty")


def read_jsonl(path: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """Read a normalized JSONL file, checking each record against `kind` when given."""
    records = []
    for i, rec in enumerate(iter_jsonl(path), start=1):
        records.append(check_record(rec, kind, f"{path}:{i}") if kind else rec)
    return records
