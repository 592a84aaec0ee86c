"""Names that appear in result paths, as small values that format and parse themselves.

Every name round-trips: ``X.parse(str(x)) == x``. The workflow's wildcards take exactly these
strings, so a path and the experiment it holds can always be read from each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from kvspec.care.vocabulary import ALLOCATIONS, FACTORIZATIONS, HEAL_METHODS


def _match(pattern: str, text: str, what: str) -> re.Match[str]:
    found = re.fullmatch(pattern, text)
    if found is None:
        raise ValueError(f"{text!r} is not a {what} name (expected {pattern})")
    return found


@dataclass(frozen=True, order=True)
class Calib:
    """A calibration set: N windows of T tokens from the set labelled `label`."""

    label: str
    n: int
    t: int
    PATTERN: ClassVar[str] = r"([a-z0-9_]+)-n(\d+)-t(\d+)"

    def __str__(self) -> str:
        return f"{self.label}-n{self.n}-t{self.t}"

    @classmethod
    def parse(cls, text: str) -> Calib:
        label, n, t = _match(cls.PATTERN, text, "calibration").groups()
        return cls(label, int(n), int(t))


@dataclass(frozen=True, order=True)
class RankPlan:
    """How ranks are chosen: uniform-r<r>, waterfill-r<r> (average r), halve-l<layer> or
    svgroup-g<group> (Figure 3.1's sensitivity plans)."""

    kind: str
    value: int
    PREFIX: ClassVar[dict[str, str]] = {
        "uniform": "r",
        "waterfill": "r",
        "halve": "l",
        "svgroup": "g",
    }
    PATTERN: ClassVar[str] = r"(uniform|waterfill)-r(\d+)|(halve)-l(\d+)|(svgroup)-g(\d+)"

    def __str__(self) -> str:
        return f"{self.kind}-{self.PREFIX[self.kind]}{self.value}"

    @property
    def sensitivity(self) -> bool:
        """True for Figure 3.1's plans (derived from a factor file, not allocated)."""
        return self.kind in ("halve", "svgroup")

    @classmethod
    def parse(cls, text: str) -> RankPlan:
        groups = [g for g in _match(cls.PATTERN, text, "rank plan").groups() if g is not None]
        return cls(groups[0], int(groups[1]))


@dataclass(frozen=True)
class Factors:
    """One factor file: a factorization method and its calibration (none for plain SVD)."""

    method: str
    calib: Calib | None

    def __post_init__(self) -> None:
        if self.method not in FACTORIZATIONS:
            raise ValueError(f"unknown factorization {self.method!r}; one of {FACTORIZATIONS}")
        if (self.method == "svd") != (self.calib is None):
            raise ValueError("plain SVD takes no calibration; asvd and care need one")

    def __str__(self) -> str:
        return f"{self.method}-{self.calib or 'none'}"

    def wildcards(self) -> dict[str, str]:
        """The rules' wildcards {fact}, {calib} of this factor file."""
        return {"fact": self.method, "calib": str(self.calib or "none")}

    @classmethod
    def of(cls, method: str, calib: Calib) -> Factors:
        """The factors of `method`, calibrated on `calib` unless it is plain SVD."""
        return cls(method, None if method == "svd" else calib)

    @classmethod
    def parse(cls, text: str) -> Factors:
        method, calib = _match(rf"({'|'.join(FACTORIZATIONS)})-(.+)", text, "factors").groups()
        return cls(method, None if calib == "none" else Calib.parse(calib))


@dataclass(frozen=True)
class Converted:
    """A converted MLA model: its factors and rank plan ("care-alpaca-n256-t32/waterfill-r8")."""

    factors: Factors
    plan: RankPlan

    def __str__(self) -> str:
        return f"{self.factors}/{self.plan}"

    def wildcards(self) -> dict[str, str]:
        """The rules' wildcards {fact}, {calib}, {plan} of this model."""
        return {**self.factors.wildcards(), "plan": str(self.plan)}

    @classmethod
    def parse(cls, text: str) -> Converted:
        factors, plan = _match(r"([^/]+)/([^/]+)", text, "converted model").groups()
        return cls(Factors.parse(factors), RankPlan.parse(plan))


@dataclass(frozen=True, order=True)
class Healed:
    """A healed checkpoint: the healing method and its token budget ("heal-svd/tokens-256")."""

    method: str
    budget: int

    def __str__(self) -> str:
        return f"heal-{self.method}/tokens-{self.budget}"

    @classmethod
    def parse(cls, text: str) -> Healed:
        method, budget = _match(
            rf"heal-({'|'.join(HEAL_METHODS)})/tokens-(\d+)", text, "healed model"
        ).groups()
        return cls(method, int(budget))


@dataclass(frozen=True, order=True)
class Original:
    """The unconverted source model."""

    def __str__(self) -> str:
        return "original"

    @classmethod
    def parse(cls, text: str) -> Original:
        _match("original", text, "original model")
        return cls()


Evaluated = Original | Converted | Healed


def parse_evaluated(text: str) -> Evaluated:
    """The evaluated model named by an evaluation path's variant part."""
    if text == "original":
        return Original()
    return Healed.parse(text) if text.startswith("heal-") else Converted.parse(text)


@dataclass(frozen=True, order=True)
class HeadRun:
    """One training run of a document-002 head: `drafter` (a key of moa.drafters or
    moa.ablation.drafters) and `repeat` (0: the head every table reads; r >= 1: Table 5's r-th
    retraining under its own seed, kvspec.plan.moa.MoAPlan.seed_of)."""

    drafter: str
    repeat: int = 0
    PATTERN: ClassVar[str] = r"([a-z0-9_]+?)(?:\.repeat([1-9]\d*))?"

    def __str__(self) -> str:
        return self.drafter if self.repeat == 0 else f"{self.drafter}.repeat{self.repeat}"

    @classmethod
    def parse(cls, text: str) -> HeadRun:
        drafter, repeat = _match(cls.PATTERN, text, "head run").groups()
        return cls(drafter, int(repeat or 0))


def fraction_name(fraction: float) -> str:
    """The path form of an index fraction: 1.0 -> "1", 0.05 -> "0.05"."""
    return f"{fraction:g}"


def _wildcard(pattern: str) -> str:
    """A name's pattern as a wildcard constraint (its groups made non-capturing)."""
    return re.sub(r"\((?!\?)", "(?:", pattern)


# the rules' wildcard constraints, from the names above (written nowhere else)
WILDCARDS: dict[str, str] = {
    "fact": "|".join(FACTORIZATIONS),
    "calib": "none|" + _wildcard(Calib.PATTERN),
    "covariance": _wildcard(Calib.PATTERN),  # a covariance file's {calib}: never "none"
    "alloc": "|".join(ALLOCATIONS),
    "rank": r"\d+",
    "plan": _wildcard(RankPlan.PATTERN),
    "sensitivity": r"halve-l\d+|svgroup-g\d+",  # Figure 3.1's plans only
    "budget": r"\d+",
    "shard": r"\d+",
    "corpus": "sft|responses",
    "responder": "sft|target",
}
