"""What a verification forward costs: the target's time to read q new positions after a
cached context, for several q, interleaved (so machine drift hits every q alike).

On a CPU this decides how a drafter should behave: if a forward with q >= 2 positions costs
about the same for every q but clearly more than one position (PyTorch's linear layers use a
matrix-vector kernel for one row and a packed matrix-matrix kernel for more), a draft pays
only when it is likely to yield a token, and then a longer or wider one costs little more.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from kvspec.decoding.cache import crop_to
from kvspec.decoding.loop import prefill


@torch.inference_mode()
def verify_costs(
    target: torch.nn.Module, context: Sequence[int], qs: Sequence[int], repeats: int = 9
) -> dict[int, float]:
    """Median seconds of one forward of q positions after `context` (cached), per q."""
    if not qs or min(qs) < 1 or repeats < 1:
        raise ValueError("qs must be positive counts and repeats at least 1")
    cache = prefill(target, list(context))
    base = cache.get_seq_length()
    token = int(context[-1])
    times: dict[int, list[float]] = {q: [] for q in qs}
    for _ in range(repeats + 1):  # the first round warms each shape up and is dropped
        for q in qs:
            ids = torch.full((1, q), token, dtype=torch.long, device=target.device)
            t0 = time.perf_counter()
            target(input_ids=ids, past_key_values=cache, use_cache=True)
            times[q].append(time.perf_counter() - t0)
            crop_to(cache, base)
    return {q: statistics.median(ts[1:]) for q, ts in times.items()}
