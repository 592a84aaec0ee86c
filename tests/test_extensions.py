"""Building the C++ kernels: a build is named by its source, flags and (when tuned) CPU."""

from __future__ import annotations

from pathlib import Path

from kvspec.extensions import build_tag
from kvspec.ngram import native


def test_build_tag_changes_with_source_flags_and_cpu(tmp_path: Path) -> None:
    source = tmp_path / "k.cpp"
    source.write_text("int f() { return 1; }\n")
    tag = build_tag(source, ["-O2"], cpu=False)
    assert tag == build_tag(source, ["-O2"], cpu=False)  # stable: the cache is found again
    assert tag != build_tag(source, ["-O3"], cpu=False)
    assert tag != build_tag(source, ["-O2"], cpu=True) or not Path("/proc/cpuinfo").exists()
    source.write_text("int f() { return 2; }\n")
    assert tag != build_tag(source, ["-O2"], cpu=False)  # an edited source is rebuilt


def test_ngram_kernel_builds_and_answers() -> None:
    """The n-gram drafters' kernel compiles here and its request-local search answers (the
    drafters' tests in tests/ngram check every function against Python references)."""
    ctx = [1, 2, 3, 1, 2, 3, 1, 2]
    assert native.native().earlier_matches(ctx, 32) == (5, [4])
    assert native.native().earlier_matches(ctx, 2) == (2, [1, 4])
