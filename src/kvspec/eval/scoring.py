"""lm-eval's HF model with log-likelihoods computed only where they are read.

lm-eval's `HFLM` applies the output head and a log-softmax to every position of every padded
row, then keeps the continuation tokens. With a large vocabulary the head dominates: Gemma-3's
262,144-token head costs more than its 18 layers, and a 16-row batch of 100 tokens makes a
1.7 GB log-softmax tensor. `ContinuationLM` runs the model's forward once per batch with a
pre-hook on the output head that keeps only the hidden states of the continuation positions.
Inputs, batching and padding are lm-eval's (right padding, no attention mask, causal models
only), so the scores are the same up to float rounding; anything else goes to lm-eval's own
implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from lm_eval.models.huggingface import HFLM
from torch import nn
from tqdm.auto import tqdm

Request = tuple[tuple[str, str], list[int], list[int]]


def _head(model: nn.Module) -> nn.Module | None:
    """The output head of `model`, when it exposes one."""
    try:
        return model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None


def continuation_logprobs(
    model: nn.Module, rows: Sequence[tuple[list[int], int]]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Log-probabilities [n, vocab] and greedy tokens [n] (on the CPU) at the last `n`
    positions of each (input tokens, n) row; rows are right-padded with 0 as lm-eval does.

    The model's own forward runs (so everything it does around the head, e.g. a final-logit
    soft-cap, still applies); a pre-hook hands the head only the gathered hidden states.
    """
    device = next(model.parameters()).device
    width = max(len(inp) for inp, _ in rows)
    batch = torch.zeros(len(rows), width, dtype=torch.long)
    for b, (inp, _) in enumerate(rows):
        batch[b, : len(inp)] = torch.tensor(inp, dtype=torch.long)
    batch = batch.to(device)
    b_idx = torch.cat([torch.full((n,), b) for b, (_, n) in enumerate(rows)]).to(device)
    t_idx = torch.cat([torch.arange(len(inp) - n, len(inp)) for inp, n in rows]).to(device)

    def gather(_module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        if args[0].shape[:2] != batch.shape:
            raise RuntimeError(f"output head got {tuple(args[0].shape)}, not every position")
        return (args[0][b_idx, t_idx], *args[1:])

    handle = _head(model).register_forward_pre_hook(gather)  # type: ignore[union-attr]
    try:
        logits = model(input_ids=batch).logits.float()
    finally:
        handle.remove()
    logp = torch.log_softmax(logits, dim=-1).cpu()
    sizes = [n for _, n in rows]
    return list(zip(logp.split(sizes), logp.argmax(-1).split(sizes), strict=True))


class ContinuationLM(HFLM):
    """`HFLM` whose log-likelihood requests score only the continuation positions."""

    def _loglikelihood_tokens(
        self, requests: list[Request], disable_tqdm: bool = False, override_bs: int | None = None
    ) -> list[tuple[float, bool]]:
        size = override_bs or self.batch_size
        if self.backend != "causal" or not isinstance(size, int) or _head(self.model) is None:
            return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i][1] + requests[i][2]))
        results: list[Any] = [None] * len(requests)
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc="loglikelihood requests")
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            rows = [self._row(requests[i]) for i in chunk]
            with torch.no_grad():
                scored = continuation_logprobs(self.model, rows)
            for i, (logp, greedy) in zip(chunk, scored, strict=True):
                cont = torch.tensor(requests[i][2][-len(greedy) :], dtype=torch.long)
                picked = logp.gather(1, cont[:, None]).squeeze(1)
                results[i] = (float(picked.sum()), bool((greedy == cont).all()))
                if requests[i][0] is not None:
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], results[i])
            bar.update(len(chunk))
        bar.close()
        return results

    def _row(self, request: Request) -> tuple[list[int], int]:
        """lm-eval's causal input (context + continuation minus the last token, left-truncated
        to the model length) and the number of continuation tokens scored."""
        _, context, continuation = request
        if not context or not continuation or len(continuation) > self.max_length:
            raise ValueError("a log-likelihood request needs a context and a continuation "
                             f"of at most {self.max_length} tokens")  # fmt: skip
        inp = (context + continuation)[-(self.max_length + 1) :][:-1]
        return inp, len(continuation)
