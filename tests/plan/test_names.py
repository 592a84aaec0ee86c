"""Names in result paths format and parse themselves: every name round-trips."""

from __future__ import annotations

import pytest

from kvspec.plan.names import (
    Calib,
    Converted,
    Factors,
    HeadRun,
    Healed,
    Original,
    RankPlan,
    fraction_name,
    parse_evaluated,
)

CALIB = Calib("wikitext2", 256, 32)


@pytest.mark.parametrize(
    "value",
    [
        CALIB,
        RankPlan("uniform", 8),
        RankPlan("waterfill", 512),
        RankPlan("halve", 0),
        RankPlan("svgroup", 9),
        Factors("svd", None),
        Factors("care", CALIB),
        Converted(Factors("asvd", CALIB), RankPlan("uniform", 16)),
        Healed("transmla-care", 49152),
        Original(),
        HeadRun("ours_tli1"),
        HeadRun("eagle_params", 2),
    ],
    ids=str,
)
def test_round_trip(value) -> None:
    assert type(value).parse(str(value)) == value
    if isinstance(value, Converted | Healed | Original):
        assert parse_evaluated(str(value)) == value


def test_paths_spell_as_before() -> None:
    """The strings are the workflow's existing path parts (no output path changes)."""
    assert str(CALIB) == "wikitext2-n256-t32"
    assert str(Converted(Factors.of("svd", CALIB), RankPlan("uniform", 8))) == "svd-none/uniform-r8"
    care = Converted(Factors.of("care", CALIB), RankPlan("waterfill", 8))
    assert str(care) == "care-wikitext2-n256-t32/waterfill-r8"
    assert str(Healed("svd", 256)) == "heal-svd/tokens-256"
    assert [fraction_name(f) for f in (1.0, 0.5, 0.01)] == ["1", "0.5", "0.01"]
    assert str(HeadRun("eagle")) == "eagle"  # the head every table reads keeps its path
    assert str(HeadRun("eagle", 1)) == "eagle.repeat1"


@pytest.mark.parametrize(
    ("cls", "text"),
    [
        (Calib, "alpaca-n16"),
        (RankPlan, "uniform-l3"),
        (RankPlan, "halve-r3"),
        (Factors, "qr-none"),
        (Converted, "svd-none"),
        (Healed, "heal-magic/tokens-5"),
        (Original, "originals"),
        (HeadRun, "eagle.repeat0"),
        (HeadRun, "eagle.repeat"),
        (HeadRun, "EAGLE"),
    ],
)
def test_malformed_names_are_refused(cls, text: str) -> None:
    with pytest.raises(ValueError, match="is not a"):
        cls.parse(text)


def test_factors_calibration_rules() -> None:
    with pytest.raises(ValueError, match="plain SVD takes no calibration"):
        Factors("svd", CALIB)
    with pytest.raises(ValueError, match="need one"):
        Factors("care", None)
    assert Factors.of("svd", CALIB).calib is None
