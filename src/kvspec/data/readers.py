"""Read raw dataset files from the mirror directory, or rows from the hub."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from kvspec.data.records import DataError, iter_jsonl

Row = dict[str, Any]


def read_file(path: Path) -> list[Row]:
    """Rows of one raw file, by extension: .json, .jsonl, .parquet, .csv, .txt/.lst, or a
    directory of .csv files (each row gets `subject` from its file name)."""
    if path.is_dir():
        return _read_csv_dir(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: file is empty")
    readers = {
        ".json": _read_json,
        ".jsonl": lambda p: list(iter_jsonl(p)),
        ".parquet": _read_parquet,
        ".csv": _read_csv,
        ".txt": _read_lines,
        ".lst": _read_lines,
    }
    if path.suffix not in readers:
        raise DataError(f"{path}: unsupported file type {path.suffix!r}")
    return readers[path.suffix](path)


def _read_json(path: Path) -> list[Row]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{err.lineno}: malformed JSON ({err.msg})") from err
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON array of records")
    return data


def _read_parquet(path: Path) -> list[Row]:
    import pandas as pd

    return pd.read_parquet(path).to_dict("records")


def _read_csv(path: Path) -> list[Row]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _read_csv_dir(path: Path) -> list[Row]:
    rows = []
    for f in sorted(path.glob("*.csv")):
        subject = f.stem.removesuffix("_test").removesuffix("_dev")
        rows += [{**r, "subject": subject} for r in _read_csv(f)]
    if not rows:
        raise DataError(f"{path}: no .csv files with rows")
    return rows


def _read_lines(path: Path) -> list[Row]:
    return [{"text": line.rstrip("\n")} for line in path.open()]


def row_location(path: Path, index: int) -> str:
    """Where raw row `index` (0-based) of `read_file(path)` sits, as `file:line` when the
    format is line-based, else `file row N`, for error messages."""
    if path.suffix == ".jsonl":  # iter_jsonl skips blank lines
        with open(path) as fh:
            lines = (n for n, line in enumerate(fh, start=1) if line.strip())
            lineno = next((n for i, n in enumerate(lines) if i == index), None)
        return f"{path}:{lineno}" if lineno else f"{path} row {index + 1}"
    if path.suffix in (".txt", ".lst"):
        return f"{path}:{index + 1}"
    return f"{path} row {index + 1}"


def read_hub(path: str, name: str | None, split: str, limit: int | None) -> list[Row]:
    """Rows from the Hugging Face hub via `datasets` (streamed, so `limit` bounds the download)."""
    import datasets

    ds = datasets.load_dataset(path, name, split=split, streaming=True)
    rows = []
    for row in ds:
        rows.append(dict(row))
        if limit is not None and len(rows) >= limit:
            break
    return rows
