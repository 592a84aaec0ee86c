"""Extra distillation text: the SFT datasets' prompts with their reference responses,
chat-rendered as the target sees them, on which a draft learns the target's teacher-forced
choices (its argmax and top-k log-probs at every response position). Prompts held out for
evaluation never enter."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvspec.models.distil import Sequence as Seq
from kvspec.ngram.prompts import prompt_key
from kvspec.seeds import numpy_generator


def heldout_prompts(responses: Iterable[Mapping[str, Any]]) -> set[str]:
    """The prompt texts (`prompt_key`) of every held-out (non-index) record of a responses
    file."""
    return {prompt_key(r["prompt"]) for r in responses if r["split"] != "index"}


def corpus_sequences(
    datasets: Mapping[str, Sequence[Mapping[str, Any]]],
    tokenizer: Any,
    stops: Sequence[int],
    *,
    exclude: set[str],
    max_len: int,
    limit: int,
    seed: int,
) -> list[Seq]:
    """A seeded choice of `limit` records (over all `datasets`, name -> records with prompt
    and response) whose prompt's `prompt_key` is not in `exclude`: prompt + reference
    response ids, first `max_len` tokens, learned from the last prompt token on."""
    from kvspec.decoding.generate import prompt_ids
    from kvspec.ngram.corpora import sft_response_ids

    pool = [(name, r) for name in sorted(datasets) for r in datasets[name]
            if prompt_key(r["prompt"]) not in exclude and r.get("response")]  # fmt: skip
    order = numpy_generator(seed, "distil corpus").permutation(len(pool))[:limit]
    seqs = []
    for i in sorted(order.tolist()):
        name, r = pool[i]
        head = prompt_ids(tokenizer, str(r["prompt"]))
        ids = head + sft_response_ids(tokenizer, str(r["prompt"]), str(r["response"]), stops)
        ids = ids[:max_len]
        if len(ids) - 1 > len(head) - 1:
            seqs.append(Seq(f"corpus/{name}/{r['id']}", tuple(int(t) for t in ids), len(head) - 1))
    return seqs
