"""Building the project's C++ kernels on first use: PyTorch's extension loader, named by a hash
of the source and flags (and of this CPU where the flags tune for it), so that a build made
from another source, or for another CPU kind of a cluster, is never loaded."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def load_extension(
    stem: str, source: Path, cflags: Sequence[str], ldflags: Sequence[str] = (), cpu: bool = False
) -> Any:
    """The compiled module of `source` (built once, then loaded from the extensions cache);
    `cpu`: the build is for this CPU kind only (e.g. -march=native)."""
    import ninja  # the build tool torch's extension loader calls (a pinned requirement)
    from torch.utils.cpp_extension import load

    if shutil.which("c++") is None and shutil.which("g++") is None:
        raise RuntimeError(f"{source.name} needs a C++ compiler (Debian: apt-get install g++)")
    os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])
    name = f"{stem}_{build_tag(source, cflags, cpu)}"
    return load(name, [str(source)], extra_cflags=list(cflags), extra_ldflags=list(ldflags),
                verbose=False)  # fmt: skip


def build_tag(source: Path, flags: Sequence[str], cpu: bool) -> str:
    """A short hash of the source, the flags and (with `cpu`) this CPU's model and flags."""
    lines: list[str] = []
    info = Path("/proc/cpuinfo")
    if cpu and info.exists():
        lines = [ln for ln in info.read_text().splitlines()
                 if ln.startswith(("flags", "model name"))][:2]  # fmt: skip
    digest = hashlib.sha256("\n".join([*lines, *flags]).encode() + source.read_bytes())
    return digest.hexdigest()[:12]
