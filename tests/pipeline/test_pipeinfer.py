"""PipeInfer's scheduling in one process: a deferred pipeline of depth D keeps several runs in
flight, so asynchronous and continuous speculation, multibuffering and cancellation all run;
the output must equal greedy decoding whatever the drafter proposes."""

from __future__ import annotations

import pytest
import torch

from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.loop import greedy_generate
from kvspec.pipeline.cells import CANONICAL
from kvspec.pipeline.pipeinfer import (
    Cutoff,
    HeadPipeline,
    PipeInferOptions,
    Run,
    Scheduler,
    advance,
    consistent,
)
from kvspec.pipeline.stage import Stage
from tests.pipeline.test_stage import tiny_llama

PROMPT, NEW = [5, 9, 2, 33, 7, 7, 41, 3], 24


def _generate(draft_model, depth: int, stops=(), **opts):
    stage = Stage(tiny_llama(0, 3), range(3), head=True)
    drafter = DraftModelDrafter(draft_model, report_confidence=True)

    def draft(seq: list[int], k: int) -> tuple[list[int], list[float]]:
        proposal = drafter.propose(seq, k)
        return proposal.tokens, proposal.confidence or []

    scheduler = Scheduler(HeadPipeline(stage, 1, depth), draft, PROMPT, NEW, stops,
                          PipeInferOptions(**opts))  # fmt: skip
    return scheduler.generate()


@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_self_drafting_equals_greedy_and_is_never_cancelled(depth) -> None:
    trace = _generate(tiny_llama(0, 3), depth, cutoff=0.0, recovery=0.0)
    assert trace.tokens == greedy_generate(tiny_llama(0, 3), PROMPT, NEW)
    assert trace.cancelled == 0 and trace.accepted == trace.drafted
    if depth == 1:  # a result is always waiting: no idle time to speculate in
        assert trace.drafted == 0 and trace.runs == NEW - 1
    else:
        assert trace.drafted > 0 and trace.runs < NEW - 1


@pytest.mark.parametrize(("depth", "micro_batch"), [(2, 1), (3, 2), (4, 4)])
def test_a_poor_drafter_is_cancelled_and_output_still_greedy(depth, micro_batch) -> None:
    trace = _generate(tiny_llama(7, 1), depth, cutoff=0.0, recovery=0.0, micro_batch=micro_batch)
    assert trace.tokens == greedy_generate(tiny_llama(0, 3), PROMPT, NEW)
    assert trace.drafted > trace.accepted
    if depth > 2:  # runs built on a rejected run are cancelled in flight
        assert trace.cancelled > 0


@pytest.mark.parametrize("depth", [2, 4])
def test_without_early_cancellation_invalid_runs_are_evaluated_and_dropped(depth) -> None:
    trace = _generate(tiny_llama(7, 1), depth, cutoff=0.0, recovery=0.0, micro_batch=2,
                      cancellation=False)  # fmt: skip
    assert trace.tokens == greedy_generate(tiny_llama(0, 3), PROMPT, NEW)
    assert trace.cancelled == 0 and trace.drafted > trace.accepted


@pytest.mark.parametrize("continuous", [True, False])
def test_without_continuous_speculation_one_run_of_batch_tokens_is_in_flight(continuous) -> None:
    stage = Stage(tiny_llama(0, 3), range(3), head=True)
    drafter = DraftModelDrafter(tiny_llama(0, 3), report_confidence=True)

    def draft(seq: list[int], k: int) -> tuple[list[int], list[float]]:
        proposal = drafter.propose(seq, k)
        return proposal.tokens, proposal.confidence or []

    opts = PipeInferOptions(cutoff=0.0, recovery=0.0, micro_batch=2, batch=6,
                            continuous=continuous)  # fmt: skip
    scheduler = Scheduler(HeadPipeline(stage, 1, 4), draft, PROMPT, NEW, (), opts)
    sizes, in_flight = [], []
    launch = scheduler._launch

    def spy(assumed, p0, seq, visible):
        launch(assumed, p0, seq, visible)
        if seq != CANONICAL:
            sizes.append(len(assumed) - p0)
            in_flight.append(sum(r.speculative for r in scheduler._valid()))

    scheduler._launch = spy
    trace = scheduler.generate()
    assert trace.tokens == greedy_generate(tiny_llama(0, 3), PROMPT, NEW)
    if continuous:  # micro-batches of 2, several in flight
        assert max(sizes) == 2 and max(in_flight) > 1
    else:
        assert max(sizes) == 6 and max(in_flight) == 1


def test_stops_at_a_stop_token() -> None:
    reference = greedy_generate(tiny_llama(0, 3), PROMPT, NEW)
    stop = reference[5]
    trace = _generate(tiny_llama(0, 3), 3, stops=[stop], cutoff=0.0)
    assert trace.tokens == reference[: reference.index(stop) + 1]


def test_a_high_cutoff_speculates_nothing() -> None:
    trace = _generate(tiny_llama(0, 3), 3, cutoff=1.01, decay=0.0)
    assert trace.drafted == 0 and trace.tokens == greedy_generate(tiny_llama(0, 3), PROMPT, NEW)


def test_advance_accepts_the_agreeing_prefix() -> None:
    """A speculative run fed 4, 5, 6 after [1, 2, 3]; the canonical run already gave 4; the
    target then says 5 (agrees) and 9 (the run's 6 is rejected)."""
    run = Run(0, 3, [4, 5, 6], 2, CANONICAL, 3, [1, 2, 3, 4, 5, 6])
    logits = torch.zeros(3, 10)
    logits[torch.arange(3), torch.tensor([5, 9, 0])] = 1.0  # (3, V)
    accepted = [1, 2, 3, 4]
    new, ok = advance(accepted, run, logits, limit=99, stops=[])
    assert (new, ok, accepted) == ([5, 9], 2, [1, 2, 3, 4, 5, 9])
    assert not consistent(Run(1, 6, [6], 4, CANONICAL | 2, 4, [1, 2, 3, 4, 5, 6, 6]), accepted)
    assert consistent(Run(2, 6, [7], 4, CANONICAL, 6, [1, 2, 3, 4, 5, 9, 7]), accepted)


def test_advance_stops_at_the_limit_and_at_a_stop_token() -> None:
    run = Run(0, 2, [3], CANONICAL, CANONICAL, 3, [1, 2, 3])
    logits = torch.eye(10)[[8]]
    assert advance([1, 2, 3], run, logits, limit=3, stops=[]) == ([], 1)
    accepted = [1, 2, 3]
    assert advance(accepted, run, logits, limit=9, stops=[8]) == ([8], 1)


def test_cutoff_recovers_decays_and_resets() -> None:
    cut = Cutoff(0.3, recovery=0.1, decay=0.25)
    cut.launched()
    cut.launched()
    assert cut.value == pytest.approx(0.5)
    cut.failed()
    assert cut.value == pytest.approx(0.25)
    cut.reset()
    assert cut.value == 0.3
    cut.failed()
    cut.failed()
    assert cut.value == 0.0


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="partitions must lie in"):
        PipeInferOptions(partitions=0)
    with pytest.raises(ValueError, match="micro_batch and batch must be"):
        PipeInferOptions(micro_batch=0)
    with pytest.raises(ValueError, match="micro_batch and batch must be"):
        PipeInferOptions(batch=0)
