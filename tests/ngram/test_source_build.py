"""The peers' shared build steps: missing tools and failing commands are named, not hidden."""

from __future__ import annotations

import sys

import pytest

from kvspec.ngram.source_build import require_tools, run_checked


def test_missing_build_tools_are_named_before_anything_runs() -> None:
    with pytest.raises(RuntimeError, match=r"building a peer needs \['no-such-tool-xyz'\]"):
        require_tools("a peer", ("no-such-tool-xyz", "sh"))
    require_tools("a peer", ("sh",))  # present: no error


def test_a_failing_command_raises_with_its_output_and_env_reaches_it() -> None:
    code = "import os, sys; print(os.environ['KVSPEC_PROBE']); sys.exit(3)"
    with pytest.raises(RuntimeError, match=r"failed \(3\):\nhello"):
        run_checked([sys.executable, "-c", code], {"KVSPEC_PROBE": "hello"})
    run_checked([sys.executable, "-c", "pass"])  # success: no error
