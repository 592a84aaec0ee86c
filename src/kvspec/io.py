"""Crash-safe file output shared by every stage (provenance records: kvspec.provenance)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling path; move it onto `final` only if the block succeeds.

    A crash (or SIGKILL) mid-write leaves at most a `.tmp-*` file, never a plausible
    `final`. Works for files and for directories (e.g. `save_pretrained` targets).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    target = tmp / final.name
    try:
        yield target
        if final.is_dir() and not final.is_symlink():
            _rmtree(final)
        os.replace(target, final)
    finally:
        _rmtree(tmp)


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def link_identical(directory: str | os.PathLike[str], reference: str | os.PathLike[str]) -> int:
    """Replace each file of `directory` that is byte-identical to the same-named file of
    `reference` by a hard link to it (e.g. a converted model's tokenizer files), so the copies
    take no extra space. Returns the number linked; files on another filesystem stay copies.
    A linked file is the reference's own: never rewrite it in place (write a new directory)."""
    import filecmp

    linked = 0
    for path in sorted(Path(directory).iterdir()):
        twin = Path(reference) / path.name
        if not (path.is_file() and twin.is_file() and filecmp.cmp(path, twin, shallow=False)):
            continue
        spare = path.with_name(f".{path.name}.link")
        try:
            os.link(twin, spare)
        except OSError:
            continue
        os.replace(spare, path)
        linked += 1
    return linked


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write `obj` as indented JSON, atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file."""
    return json.loads(Path(path).read_text())


def write_rows(path: str | os.PathLike[str], rows: pd.DataFrame, prov: dict[str, Any]) -> None:
    """A table as CSV under a `# provenance: {...}` comment line, atomically."""
    write_text(path, f"# provenance: {json.dumps(prov, default=str)}\n" + rows.to_csv(index=False))


def read_rows(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A table written by `write_rows` (its provenance line skipped)."""
    import pandas as pd

    text = Path(path).read_text()
    body = text.split("\n", 1)[1] if text.startswith("#") else text
    return pd.read_csv(io.StringIO(body))


class Journal:
    """An append-only JSONL record of finished work units, so a killed job resumes where it
    stopped: `done()` reads the complete lines (a line torn by a crash ends the read and is
    redone), `append` makes each unit durable before the next starts, `finish` removes the
    journal once the job's output is written."""

    def __init__(self, path: str | os.PathLike[str] | None, key: str = "id") -> None:
        self.path, self.key = (Path(path) if path else None), key

    def done(self) -> dict[Any, dict[str, Any]]:
        """key -> record of every unit already finished."""
        done: dict[Any, dict[str, Any]] = {}
        if self.path is None or not self.path.exists():
            return done
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break  # cut short by a crash: redo from here
            done[_key(record[self.key])] = record
        return done

    def append(self, records: list[dict[str, Any]]) -> None:
        if self.path is None or not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in records)
            fh.flush()
            os.fsync(fh.fileno())

    def finish(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def _key(value: Any) -> Any:
    """A hashable key from a JSON value (lists become tuples)."""
    return tuple(value) if isinstance(value, list) else value
