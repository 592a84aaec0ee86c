"""Timing helpers shared by the measuring code (lecture examples, the pipeline simulator's
calibration)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of `repeats` calls of `fn`, after one discarded warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
