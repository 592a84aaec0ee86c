"""Token-id documents for the n-gram indexes and the acceptance analysis.

SFT responses are tokenized as the target sees them inside its chat template (the assistant
turn after the generation prompt, up to its end-of-turn token), so SFT and target-response
indexes hold comparable documents. Target responses are already token ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvspec.decoding.generate import prompt_ids, trim_response
from kvspec.ngram.prompts import index_prompts


def sft_response_ids(tokenizer: Any, prompt: str, response: str, stops: Sequence[int]) -> list[int]:
    """The SFT response's ids as the assistant turn of the chat, ending at its stop token."""
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
    full = tokenizer.apply_chat_template(messages, tokenize=True)
    if hasattr(full, "keys"):
        full = full["input_ids"]
    head = prompt_ids(tokenizer, prompt)
    if list(full[: len(head)]) != head:  # a template that renders turns differently
        return tokenizer(response, add_special_tokens=False)["input_ids"]
    return trim_response(full[len(head) :], stops, None)


def index_documents(
    records: Sequence[Mapping[str, Any]],
    corpus: str,
    fraction: float,
    tokenizer: Any,
    stops: Sequence[int],
) -> list[list[int]]:
    """Documents of the `corpus` ("sft" or "responses") index over the nested `fraction` of
    the index prompts; held-out prompts never enter."""
    chosen = index_prompts(records, fraction)
    if corpus == "responses":
        return [list(r["response_ids"]) for r in chosen if r["response_ids"]]
    if corpus == "sft":
        return [sft_response_ids(tokenizer, r["prompt"], r["sft_response"], stops) for r in chosen]
    raise ValueError(f"unknown index corpus {corpus!r} (sft or responses)")


def heldout_items(
    records: Sequence[Mapping[str, Any]],
    heldout: str,
    responses: str,
    tokenizer: Any,
    stops: Sequence[int],
    max_tokens: int | None = None,
) -> list[tuple[str, list[int], list[int]]]:
    """(prompt id, prompt ids, output ids) of a held-out set; outputs are the SFT responses
    ("sft") or the target's greedy responses ("target"), cut to `max_tokens` so that both
    kinds cover the same positions (the target's responses stop at its generation budget)."""
    items = []
    for r in records:
        if r["split"] != heldout:
            continue
        ids = r.get("prompt_ids") or prompt_ids(tokenizer, r["prompt"])
        if responses == "target":
            out = list(r["response_ids"])
        else:
            out = sft_response_ids(tokenizer, r["prompt"], r["sft_response"], stops)
        items.append((r["id"], ids, out[:max_tokens]))
    if not items:
        raise ValueError(f"no prompts in held-out set {heldout!r}")
    return items
