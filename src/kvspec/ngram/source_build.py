"""What the peers' builds from pinned PyPI source releases share (`suffix_peer`,
`llamacpp_peer`): the build tools they need, checked commands, the source download."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def require_tools(what: str, tools: tuple[str, ...] = ("cmake", "c++")) -> None:
    """Raise naming the missing build tools (and the Debian packages) before any download."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"building {what} needs {missing} (Debian: apt-get install cmake g++)")


def run_checked(cmd: list[str], env: dict[str, str] | None = None) -> None:
    """Run `cmd` with `env` added to this environment; on failure raise with its output's tail."""
    done = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:5])} … failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")  # fmt: skip


def pip(*args: str, env: dict[str, str] | None = None) -> None:
    """This interpreter's pip, quietly, checked."""
    run_checked([sys.executable, "-m", "pip", *args, "--quiet"], env)


def download_sdist(package: str, version: str, work: Path, *options: str) -> Path:
    """The source release of `package`==`version`, downloaded into `work/sdist` (`options`:
    further `pip download` options)."""
    pip("download", f"{package}=={version}", "--no-deps", "--no-binary", ":all:", *options,
        "-d", str(work / "sdist"))  # fmt: skip
    stem = package.replace("-", "_")
    found = sorted((work / "sdist").glob(f"{stem}-*.tar.gz"))
    if not found:
        raise RuntimeError(f"pip downloaded no {package} {version} source release")
    return found[0]
