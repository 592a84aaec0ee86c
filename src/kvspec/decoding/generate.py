"""Target-model responses to SFT prompts: batched greedy generation, sharded and resumable.

The responses feed the target-output n-gram index (thesis 4.4.1.2) and the acceptance
analysis. Prompts are rendered with the tokenizer's chat template and left padded, so a
batch of prompts of different lengths generates in one `model.generate` call. Each shard
is an independent output file (a scatter/gather across jobs), and within a shard every
finished batch is appended to a checkpoint, so a crash redoes at most one batch.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from kvspec.data.records import write_jsonl
from kvspec.io import Journal

log = logging.getLogger(__name__)


def shard_slice(n_items: int, n_shards: int, shard: int) -> range:
    """Indices of shard `shard` of `n_shards` contiguous, near-equal parts of n_items."""
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} outside [0, {n_shards})")
    return range(shard * n_items // n_shards, (shard + 1) * n_items // n_shards)


def stop_ids(model: torch.nn.Module, tokenizer: Any) -> list[int]:
    """Token ids that end a response: the generation config's eos ids, else the tokenizer's."""
    return _eos_list(getattr(model.generation_config, "eos_token_id", None), tokenizer)


def config_stops(model_dir: str | os.PathLike[str], tokenizer: Any) -> list[int]:
    """`stop_ids` of a saved model, read from its generation config without loading weights."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:  # no generation_config.json
        eos = None
    return _eos_list(eos, tokenizer)


def _eos_list(eos: int | Sequence[int] | None, tokenizer: Any) -> list[int]:
    if eos is None:
        eos = tokenizer.eos_token_id
    return [int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])]


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """Token ids of `prompt` as one user turn plus the assistant header (chat template)."""
    messages = [{"role": "user", "content": prompt}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in some versions
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def trim_response(ids: Sequence[int], stops: Sequence[int], pad_id: int | None) -> list[int]:
    """Generated ids up to and including the first stop token, padding dropped."""
    out: list[int] = []
    for t in ids:
        t = int(t)
        if t in stops:
            out.append(t)
            break
        if pad_id is not None and t == pad_id:
            break
        out.append(t)
    return out


@torch.inference_mode()
def generate_batch(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    pad_id: int,
    stops: Sequence[int],
) -> list[list[int]]:
    """Greedy responses to tokenized prompts, generated together with left padding."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros_like(ids)  # (B, T): 1 on real tokens
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[row, width - len(p) :] = 1
    out = model.generate(
        input_ids=ids.to(model.device),
        attention_mask=mask.to(model.device),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad_id,
        eos_token_id=list(stops),
    )  # (B, T + new)
    return [trim_response(row[width:].tolist(), stops, pad_id) for row in out.cpu()]


def _batches(records: list[dict[str, Any]], batch_size: int) -> Iterator[list[dict[str, Any]]]:
    """Batches of records of similar prompt length (less padding), longest first."""
    ordered = sorted(records, key=lambda r: -len(r["prompt_ids"]))
    for start in range(0, len(ordered), batch_size):
        yield ordered[start : start + batch_size]


def generate_shard(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: list[dict[str, Any]],
    out_path: str | os.PathLike[str],
    max_new_tokens: int,
    batch_size: int,
    checkpoint: str | os.PathLike[str] | None = None,
    *,
    stops: Sequence[int] | None = None,
    engine: Any = None,
) -> int:
    """Generate greedy responses to `prompts` ({id, prompt, ...}) and write them as JSONL.

    Output records keep the input fields and add `prompt_ids`, `response_ids`,
    `response` (decoded text) and `finished` (a stop token was produced). Records already
    in `checkpoint` are reused, new batches are appended to it as they finish, and the
    output is written atomically in input order. Returns the number of newly generated
    responses. `engine(prompts, max_new_tokens, stops)` generates a batch instead of the
    model's `generate` (e.g. `kvspec.decoding.vllm_client.VllmGenerator`; `model` may then
    be None and `stops` must be given).
    """
    journal = Journal(checkpoint)
    done = journal.done()
    stops = list(stops) if stops is not None else stop_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    todo = [
        {**p, "prompt_ids": prompt_ids(tokenizer, p["prompt"])}
        for p in prompts
        if p["id"] not in done
    ]
    log.info("%d prompts, %d from checkpoint, %d to generate", len(prompts), len(done), len(todo))
    new = 0
    with tqdm(total=len(todo), desc="generate", unit="prompt", mininterval=5) as bar:
        for batch in _batches(todo, batch_size):
            ids = [b["prompt_ids"] for b in batch]
            if engine is None:
                outs = generate_batch(model, ids, max_new_tokens, pad, stops)
            else:
                outs = [trim_response(o, stops, None) for o in engine(ids, max_new_tokens, stops)]
            recs = [
                _response_record(b, o, tokenizer, stops) for b, o in zip(batch, outs, strict=True)
            ]
            done.update({r["id"]: r for r in recs})
            journal.append(recs)
            new += len(recs)
            bar.update(len(batch))
    write_jsonl(out_path, [done[p["id"]] for p in prompts])
    journal.finish()
    return new


def _response_record(
    prompt: dict[str, Any], response_ids: list[int], tokenizer: Any, stops: Sequence[int]
) -> dict[str, Any]:
    text_ids = [t for t in response_ids if t not in stops]
    return {
        **prompt,
        "response_ids": response_ids,
        "response": tokenizer.decode(text_ids, skip_special_tokens=True),
        "finished": bool(response_ids) and response_ids[-1] in stops,
    }


def gather_shards(
    shards: Sequence[str | os.PathLike[str]], out_path: str | os.PathLike[str]
) -> int:
    """Concatenate shard files in order into one JSONL; return the number of records."""
    records = [json.loads(line) for s in shards for line in Path(s).read_text().splitlines()]
    ids = [r["id"] for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate prompt ids across shards: shards overlap")
    write_jsonl(out_path, records)
    return len(records)


def generation_prompts(
    prompts: Sequence[dict[str, Any]], fraction: float, heldout: bool = True
) -> list[dict[str, Any]]:
    """The prompts a model answers: the nested `fraction` of the index prompts
    (rank < fraction * n_index) and, if `heldout`, every held-out prompt (the main target's
    held-out answers are the positions of the acceptance analysis; other models need none)."""
    n_index = sum(p["split"] == "index" for p in prompts)
    cut = round(fraction * n_index)
    return [p for p in prompts if (p["rank"] < cut if p["split"] == "index" else heldout)]
