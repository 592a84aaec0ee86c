"""The simulator's costs measured on our models (`kvspec.pipeline.simulate.Calibration`).

One decoder layer, the output head and the draft model are timed in this process with the
threads a pipeline rank gets: a decoder layer on q new tokens after a cache of `context`
tokens (the whole stack timed, divided by its layers), the final norm + output head + argmax
on q rows, and the draft model proposing k tokens after a context it has cached. Each cost is
fitted as a + b·q by least squares over medians of `repeats` timings.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import torch

from kvspec.pipeline.simulate import Calibration
from kvspec.seeds import derive
from kvspec.timing import median_seconds

FEEDS = (1, 2, 4, 8)
DRAFTS = (1, 2, 4)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line, the intercept floored at 0."""
    slope, intercept = statistics.linear_regression(xs, ys)
    return max(intercept, 0.0), slope


@torch.inference_mode()
def calibrate(target: torch.nn.Module, draft: torch.nn.Module, *, context: int, repeats: int,
              seed: int) -> tuple[Calibration, dict[str, Any]]:  # fmt: skip
    """The costs of `target` (a decoder without per-layer windows) and `draft`; the
    calibration and the raw medians behind it."""
    from kvspec.decoding.draft_model import DraftModelDrafter
    from kvspec.pipeline.stage import Stage

    cfg = target.config
    layers = cfg.num_hidden_layers
    gen = torch.Generator().manual_seed(derive(seed, "context"))
    ctx = torch.randint(0, cfg.vocab_size, (context,), generator=gen).tolist()
    stage = Stage(target, range(layers), head=True)
    stage(stage.embed_tokens(ctx))  # the cache every timing starts from

    def step(q: int) -> None:
        stage(stage.embed_tokens(ctx[:q]))
        stage.crop(context)

    def sample(q: int) -> None:
        torch.argmax(stage.logits(torch.randn(1, q, cfg.hidden_size, generator=gen)), dim=-1)

    drafter = DraftModelDrafter(draft, report_confidence=True)  # as PipeInfer's draft rank

    def drafting(k: int) -> None:
        ctx.append(int(torch.randint(0, cfg.vocab_size, (1,), generator=gen)))
        drafter.propose(ctx, k)  # one new context token, then k drafted: as in decoding

    def timed(fn, sizes) -> dict[int, float]:
        return {n: median_seconds(lambda n=n: fn(n), repeats) for n in sizes}

    raw = {"stack": timed(step, FEEDS), "head": timed(sample, FEEDS),
           "draft": timed(drafting, DRAFTS)}  # fmt: skip
    layer = [t / layers for t in raw["stack"].values()]
    dtype_bytes = next(target.parameters()).element_size()
    cal = Calibration(
        layer=fit_line(FEEDS, layer), head=fit_line(FEEDS, list(raw["head"].values())),
        draft=fit_line(DRAFTS, list(raw["draft"].values())), layers=layers,
        hidden=cfg.hidden_size, bytes_per_value=dtype_bytes,
    )  # fmt: skip
    return cal, {"context": context, "repeats": repeats, "medians_s": raw,
                 "bytes": weight_bytes(target, draft)}  # fmt: skip


def weight_bytes(target: torch.nn.Module, draft: torch.nn.Module) -> dict[str, int]:
    """Bytes of one decoder layer, the embedding, the final norm + output head (counted once
    when tied to the embedding) and the whole draft model."""

    def size(module: torch.nn.Module) -> int:
        return sum(p.numel() * p.element_size() for p in module.parameters())

    inner = target.model
    tied = target.lm_head.weight is inner.embed_tokens.weight
    return {"layer": size(inner.layers[0]), "embed": size(inner.embed_tokens),
            "head": size(inner.norm) + (0 if tied else size(target.lm_head)),
            "draft": size(draft)}  # fmt: skip
