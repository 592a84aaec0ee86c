"""Building the C++ kernels: a build is named by its source, flags and (when tuned) CPU
(each kernel's own tests build it: tests/decoding/test_packed.py, tests/ngram/test_native.py)."""

from __future__ import annotations

from pathlib import Path

from kvspec.extensions import build_tag


def test_build_tag_changes_with_source_flags_and_cpu(tmp_path: Path) -> None:
    source = tmp_path / "k.cpp"
    source.write_text("int f() { return 1; }\n")
    tag = build_tag(source, ["-O2"], cpu=False)
    assert tag == build_tag(source, ["-O2"], cpu=False)  # stable: the cache is found again
    assert tag != build_tag(source, ["-O3"], cpu=False)
    assert tag != build_tag(source, ["-O2"], cpu=True) or not Path("/proc/cpuinfo").exists()
    source.write_text("int f() { return 2; }\n")
    assert tag != build_tag(source, ["-O2"], cpu=False)  # an edited source is rebuilt
