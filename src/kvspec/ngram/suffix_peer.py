"""Arctic Inference's SuffixDecoding as a peer drafter, built from its source release.

The `arctic-inference` sdist targets vLLM on GPUs; its only piece that runs here is the suffix
tree (`csrc/suffix_decoding`, C++20 with nanobind bindings) and its Python cache. We build just
that: download the sdist (pinned version), build the `_C` extension with CMake against this
interpreter, and assemble `arctic_inference.suffix_decoding` in a directory of its own (nothing
else of the package is imported, so vLLM is not needed).

`ArcticSuffixDrafter` drafts with the published algorithm: a global tree of previous responses
(here: the target-response corpus that the infini-gram target index is built from) plus a
request-local tree of the prompt and the response so far; `speculate(use_tree_spec=True)`
returns a draft tree, verified by `kvspec.decoding.tree`. A benchmark request's own response is
evicted from the global tree when the next request starts, so repeated runs of the same prompt
never draft from themselves.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kvspec.decoding.tree import DraftTree
from kvspec.io import atomic_path
from kvspec.ngram.source_build import download_sdist, pip, require_tools, run_checked

VERSION = "0.3.0"
NANOBIND = "2.9.2"
# SuffixDecoding's defaults in Arctic Inference's vLLM plugin
DEFAULTS = {"max_tree_depth": 24, "max_spec_factor": 1.0, "max_spec_offset": 0.0,
            "min_token_prob": 0.1}  # fmt: skip


def build_arctic_suffix(dest: Path, threads: int = 1, version: str = VERSION) -> Path:
    """Build `arctic_inference.suffix_decoding` into `dest` (atomically); return `dest`."""
    require_tools("Arctic Inference's suffix tree")
    with tempfile.TemporaryDirectory() as work_dir, atomic_path(dest) as out:
        work = Path(work_dir)
        sdist = download_sdist("arctic-inference", version, work, "--no-build-isolation")
        src = _extract(sdist, work, version)
        # not kvspec.models.packaged.install_packages: that module imports gguf, which the
        # evaluation environment of the rules reaching this one does not provide
        pip("install", "--no-deps", "--target", str(work / "nanobind"), f"nanobind=={NANOBIND}")
        env = {"PYTHONPATH": str(work / "nanobind")}
        run_checked(["cmake", "-S", str(src / "csrc"), "-B", str(work / "build"),
              f"-DPython_EXECUTABLE={sys.executable}"], env)  # fmt: skip
        run_checked(["cmake", "--build", str(work / "build"), f"-j{threads}"], env)
        pkg = out / "arctic_inference"
        shutil.copytree(src / "python", pkg / "suffix_decoding")
        (pkg / "__init__.py").write_text("")
        for lib in (work / "build").glob("_C*.so"):
            shutil.copy2(lib, pkg / "suffix_decoding" / lib.name)
        shutil.copy2(src / "LICENSE", out / "LICENSE")
        run_checked([sys.executable, "-c", "from arctic_inference.suffix_decoding import "
              "SuffixDecodingCache"], {"PYTHONPATH": str(out)})  # fmt: skip
        sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
        info = {"package": "arctic-inference", "version": version, "sdist": sdist.name,
                "sdist_sha256": sha, "nanobind": NANOBIND, "compiler": _compiler()}  # fmt: skip
        (out / "BUILD.json").write_text(json.dumps(info, indent=2))
    return dest


def _extract(sdist: Path, work: Path, version: str) -> Path:
    """csrc/suffix_decoding, the suffix_decoding Python files and LICENSE, under work/src."""
    root = f"arctic_inference-{version}/"
    parts = {
        root + "csrc/suffix_decoding/": "csrc/",
        root + "arctic_inference/suffix_decoding/": "python/",
        root + "LICENSE": "LICENSE",
    }
    src = work / "src"
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            for prefix, into in parts.items():
                if member.isfile() and member.name.startswith(prefix):
                    rel = into + member.name[len(prefix) :] if into.endswith("/") else into
                    (src / rel).parent.mkdir(parents=True, exist_ok=True)
                    (src / rel).write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
    if not (src / "csrc" / "CMakeLists.txt").exists():
        raise RuntimeError(f"{sdist.name} has no csrc/suffix_decoding/CMakeLists.txt")
    return src


def _compiler() -> str:
    out = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else "unknown"


def load_cache_class(build_dir: str | Path) -> Any:
    """`SuffixDecodingCache` from a directory written by `build_arctic_suffix`."""
    path = str(Path(build_dir).resolve())
    if path not in sys.path:
        sys.path.insert(0, path)
    from arctic_inference.suffix_decoding import SuffixDecodingCache

    return SuffixDecodingCache


class ArcticSuffixDrafter:
    """Tree drafts from Arctic Inference's SuffixDecodingCache (see the module docstring)."""

    def __init__(
        self,
        build_dir: str | Path,
        corpus: Iterable[tuple[Sequence[int], Sequence[int]]],  # (prompt, response) ids
        max_spec_tokens: int,
        settings: dict[str, float] | None = None,
    ) -> None:
        opts = {**DEFAULTS, **(settings or {})}
        cls = load_cache_class(build_dir)
        self.cache = cls(max_tree_depth=int(opts["max_tree_depth"]), max_cached_requests=-1)
        for i, (prompt, response) in enumerate(corpus):
            self.cache.start_request(("corpus", i), list(prompt))
            self.cache.add_active_response(("corpus", i), list(response))
            self.cache.stop_request(("corpus", i))
        self.opts, self.max_spec_tokens = opts, max_spec_tokens
        self.request = 0
        self.context: list[int] = []

    def propose_tree(self, context: list[int], max_depth: int) -> DraftTree:
        """A draft tree of at most `max_depth` levels after `context`."""
        self._sync(context)
        depth = min(self.max_spec_tokens, max_depth)
        if depth < 1:
            return DraftTree()
        draft = self.cache.speculate(
            self._req(), context, max_spec_tokens=depth,
            max_spec_factor=self.opts["max_spec_factor"],
            max_spec_offset=self.opts["max_spec_offset"],
            min_token_prob=self.opts["min_token_prob"], use_tree_spec=True,
        )  # fmt: skip
        return DraftTree(list(draft.token_ids), list(draft.parents), list(draft.probs))

    def _sync(self, context: list[int]) -> None:
        """Start a request for a new context; append newly committed tokens otherwise."""
        prev = self.context
        if prev and context[: len(prev)] == prev and len(context) >= len(prev):
            if len(context) > len(prev):
                self.cache.add_active_response(self._req(), context[len(prev) :])
        else:
            self._finish()
            self.request += 1
            self.cache.start_request(self._req(), context)
        self.context = list(context)

    def _finish(self) -> None:
        """Stop the current request and drop its response from the global tree."""
        if self.context:
            self.cache.stop_request(self._req())
            if self._req() in self.cache.cached_requests:
                self.cache.evict_cached_response(self._req())

    def _req(self) -> tuple[str, int]:
        return ("request", self.request)
