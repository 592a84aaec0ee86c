"""The replay CLI's spec.decode changes."""

from __future__ import annotations

import pytest

from kvspec.ngram.replay_cli import _changed, _humaneval, _variant, held_out_span


def test_decode_changes_are_dotted_keys_with_yaml_values():
    decode = {"k": 8, "adaptive": {"k": 16, "local": "suffix"}}
    out = _changed(decode, ["k=4", "adaptive.local=prompt_lookup", "adaptive.k=8"])
    assert out == {"k": 4, "adaptive": {"k": 8, "local": "prompt_lookup"}}
    assert decode["adaptive"]["k"] == 16  # the config itself is left alone
    for unknown in ("adaptive.depth=3", "tree.depth=3", "k.x=1"):
        with pytest.raises(SystemExit, match="no key"):
            _changed(decode, [unknown])
    with pytest.raises(SystemExit, match="key=value"):
        _changed(decode, ["k"])


def test_variants_are_labelled_change_lists():
    assert _variant("before: adaptive.k=8 adaptive.local=prompt_lookup") == (
        "before", ["adaptive.k=8", "adaptive.local=prompt_lookup"])  # fmt: skip
    assert _variant("config:") == ("config", [])
    for bad in ("adaptive.k=8", ": k=3"):
        with pytest.raises(SystemExit, match="label"):
            _variant(bad)


def test_humaneval_span_is_checked():
    assert _humaneval(None, None, "", "", {}, 128) == {}
    for bad in ("5", "4:2", "a:b"):
        with pytest.raises(SystemExit, match="a:b"):
            _humaneval(None, None, "", bad, {}, 128)


def test_default_span_leaves_out_the_benchmarked_problems():
    """Knobs are replayed on HumanEval problems Table 4.7 does not time."""
    assert held_out_span(10) == "10:40"
    assert held_out_span(3, end=20) == "3:20"
    assert held_out_span(164) == ""  # paper scale: the benchmark takes every problem
