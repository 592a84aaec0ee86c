"""Independent random streams split from one run seed.

Every random consumer (a drafter, a verifier, an inner verifier, a sampler, a bootstrap, each
sample of a pass@k run) names itself by a path of roles and indices, and draws from the stream
`numpy.random.SeedSequence` derives from (run seed, path). Two different paths give
statistically independent streams; the same path always gives the same stream. Arithmetic on
seeds (`seed + 1`, `seed + 1000 * p + c`) is what this replaces: neighbouring consumers then
share random numbers (the verifier of sample `s + 1` drew the draft of sample `s`).
"""

from __future__ import annotations

import hashlib
import random

import numpy as np

Part = str | int


def derive(seed: int, *path: Part, bits: int = 63) -> int:
    """A `bits`-bit seed for the consumer at `path` under the run's `seed` (32 for APIs that
    refuse larger seeds, such as numpy's legacy `np.random.seed`)."""
    if not 1 <= bits <= 63:
        raise ValueError(f"bits must be in [1, 63], got {bits}")
    # the path's length is part of the key: SeedSequence pads its entropy with zeros, so
    # (seed, a) and (seed, a, 0) would otherwise name one stream
    words = [int(seed) & 0xFFFFFFFFFFFFFFFF, len(path), *(_word(p) for p in path)]
    state = np.random.SeedSequence(words).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31 | int(state[1]) >> 1) >> (63 - bits)


def numpy_generator(seed: int, *path: Part) -> np.random.Generator:
    """A numpy `Generator` on the stream at `path`."""
    return np.random.default_rng(derive(seed, *path))


def python_random(seed: int, *path: Part) -> random.Random:
    """A `random.Random` on the stream at `path`."""
    return random.Random(derive(seed, *path))


def _word(part: Part) -> int:
    """A non-negative integer naming one path element; strings and integers never collide."""
    if isinstance(part, bool) or not isinstance(part, int | str):
        raise TypeError(f"a stream path holds strings and integers, not {part!r}")
    if isinstance(part, int):
        if part < 0:
            raise ValueError(f"stream indices are non-negative, got {part}")
        return (part + 1) << 1  # even and never 0: an index
    digest = hashlib.blake2b(part.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") << 1 | 1  # odd: a role name
