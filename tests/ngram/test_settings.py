"""The spec block's cross-key checks name the offending key."""

from __future__ import annotations

import copy

import pytest

from kvspec.config import ConfigError, validate


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda s: s.update(target="nope"), "spec.target"),
        (lambda s: s["prompts"].update(sources=["humaneval"]), "spec.prompts.sources"),
        (lambda s: s["heldout"]["general"].update(sources=["c4"]), "spec.heldout.general.sources"),
        (lambda s: s["index"].update(sft_fractions=[0.5]), "spec.index.sft_fractions"),
        (lambda s: s["acceptance"].update(heldout=["missing"]), "spec.acceptance"),
        (
            lambda s: s["speed"]["sets"]["humaneval"].update(prompts="c4"),
            "spec.speed.sets.humaneval",
        ),
        (
            lambda s: s["speed"]["runs"]["target"].update(methods=["sd_draft"]),
            "spec.speed.runs.target",
        ),
        (lambda s: s["generate"].update(models={"target_alt": 1.0}), "spec.generate.models"),
    ],
)
def test_bad_spec_reference_names_the_key(mini_config, schema, edit, key):
    from kvspec.ngram.settings import check_spec

    filled = validate(mini_config, schema)
    check_spec(filled)  # the shipped config is consistent
    bad = copy.deepcopy(filled)
    edit(bad["spec"])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        check_spec(bad)


def test_unknown_spec_key_is_refused(mini_config, schema):
    mini_config["spec"]["decode"]["depth"] = 4
    with pytest.raises(ConfigError, match="spec.decode"):
        validate(mini_config, schema)


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [({"prompts": "he", "n": 10}, {"prompts": "he", "skip": 10, "n": 5}, False),
     ({"prompts": "he", "n": 10}, {"prompts": "he", "skip": 9, "n": 5}, True),
     ({"prompts": "he", "n": 10}, {"prompts": "mbpp", "n": 10}, False),
     ({"prompts": "sb", "n": 2, "categories": ["qa"]},
      {"prompts": "sb", "skip": 2, "n": 2, "categories": ["qa"]}, False),
     ({"prompts": "sb", "n": 2, "categories": ["qa"]}, {"prompts": "sb", "skip": 2, "n": 2}, True)],
)  # fmt: skip
def test_sets_overlap_by_source_range_and_turn_order(a, b, overlap):
    from kvspec.ngram.settings import _overlap

    assert _overlap(a, b) is overlap and _overlap(b, a) is overlap
