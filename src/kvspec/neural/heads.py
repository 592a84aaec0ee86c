"""Document 002's neural drafters as stages: build and train a head against the frozen target
on the target's own responses, then decode with every head (chain and EAGLE-2 tree) beside
greedy decoding and the n-gram methods, per prompt set, side by side in one process.

A drafter is declared by a mapping: `kind` (moa | eagle | independent) and its sizes
(`tli`, `lsa_intermediate`, `sa_intermediate`, `ca_intermediate` for MoA; `layers`,
`intermediate` for Independent; EAGLE's one decoder layer is the target's own shape).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from kvspec.devices import to_cpu
from kvspec.io import atomic_path, write_json, write_text
from kvspec.provenance import provenance
from kvspec.seeds import derive

log = logging.getLogger(__name__)
KINDS = ("moa", "eagle", "independent")
MOA_SIZES = ("lsa_intermediate", "sa_intermediate", "ca_intermediate", "tli", "state")


def build_head(target: nn.Module, drafter: Mapping[str, Any]) -> nn.Module:
    """A fresh head of `drafter['kind']` sized by the declaration, on `target`."""
    kind = drafter["kind"]
    if kind == "moa":
        from kvspec.neural.moa import MoAHead, MoASize

        return MoAHead(target, MoASize(**{k: drafter[k] for k in MOA_SIZES if k in drafter}))
    if kind == "eagle":
        from kvspec.neural.eagle import EagleHead

        return EagleHead(target, drafter.get("layers", 1), drafter.get("intermediate"))
    if kind == "independent":
        from kvspec.neural.independent import IndependentHead

        width = drafter.get("intermediate") or target.config.intermediate_size
        return IndependentHead(target, layers=drafter.get("layers", 1), intermediate=width)
    raise ValueError(f"drafter kind must be one of {KINDS}, not {kind!r}")


SAVED = "saved"  # load_head's default vocabulary: the one the head was saved with


def load_head(path: str | Path, target: nn.Module,
              vocab: int | str | None = SAVED) -> tuple[nn.Module, dict[str, Any]]:  # fmt: skip
    """(the trained head, its declaration) from a file written by `head_train_stage`,
    drafting over the vocabulary it was saved with, or over the `vocab` tokens the target
    output most in its training responses (None: every token)."""
    from kvspec.decoding.packed import engine_of, pack_linears
    from kvspec.models.draft_vocab import frozen_readout, vocabulary_of

    saved = torch.load(path, map_location="cpu", weights_only=False)
    head = build_head(target, saved["drafter"])
    head.load_state_dict(saved["state"])
    if vocab == SAVED:
        ids = saved.get("readout")
    elif saved.get("order") is None:
        raise ValueError(f"{path} holds no token ranking (trained before readouts): "
                         "retrain it to draft over another vocabulary")  # fmt: skip
    else:
        ids = vocabulary_of(target, saved["order"].tolist(), vocab)
    if ids is not None:  # the N tokens it drafts over
        head.readout = frozen_readout(target, ids)
    head = head.to(next(target.parameters()).device).eval()
    return pack_linears(head, engine_of(target)), saved["drafter"]  # the target's engine


def head_stats(path: str | Path) -> dict[str, Any]:
    """The training stats saved with a head (sizes, tokens, time, final validation)."""
    return dict(torch.load(path, map_location="cpu", weights_only=False)["stats"])


def head_train_stage(
    inputs: Mapping[str, str],
    out: str,
    *,
    drafter: Mapping[str, Any],
    train: Mapping[str, Any],
    data: Mapping[str, Any],
    loss: Mapping[str, Any],
    device: str,
    dtype: str,
    seed: int,
    threads: int,
    processes: int = 1,
) -> None:
    """Train one head (`inputs`: `target` model, its `responses`) over the `data['vocab']`
    tokens the target outputs most in its training responses (null: all), the tokens it then
    drafts over, and save it with them, its curve,
    sizes (trainable parameters, relative to one target decoder layer) and training cost.
    The target's states come from the cache `data['state_cache']` (shared by every head of
    the target; `data['state_depth']` hidden depths in `data['state_dtype']`), or from a
    target forward per sequence without `data['cache_states']`. With
    `processes` > 1 the head trains data parallel, one process per GPU (gloo on CPU)."""
    if processes > 1:
        if train["batch_size"] < processes:
            raise ValueError(f"moa.train.batch_size {train['batch_size']} is below the "
                             f"{processes} data-parallel processes")  # fmt: skip
        from kvspec.models.parallel import launch

        launch(_train_and_save, processes, inputs, out, drafter, train, data, loss, device,
               dtype, seed, threads)  # fmt: skip
    else:
        _train_and_save(inputs, out, drafter, train, data, loss, device, dtype, seed, threads)


def _train_and_save(inputs: Mapping[str, str], out: str, drafter: Mapping[str, Any],
                    train: Mapping[str, Any], data: Mapping[str, Any], loss: Mapping[str, Any],
                    device: str, dtype: str, seed: int, threads: int) -> None:  # fmt: skip
    """One process's training (all of it, or its data-parallel share); the first writes."""
    from kvspec.data.records import read_jsonl
    from kvspec.models.distil import (
        DistilSpec,
        distil_sequences,
        split_sequences,
        teacher_order,
    )
    from kvspec.models.draft_vocab import vocabulary_of
    from kvspec.models.load import load_model, resolve_dtype, use_threads
    from kvspec.models.parallel import rank_and_world
    from kvspec.neural.head_train import (
        HeadLoss,
        decoder_layer_parameters,
        train_head,
        trainable_parameters,
    )
    from kvspec.neural.target_states import StateCache, target_readout, weights_fingerprint

    rank, world = rank_and_world()
    use_threads(max(1, threads // world))
    device = f"cuda:{rank}" if device == "cuda" and world > 1 else device
    torch.manual_seed(derive(seed, "init"))  # every process builds the same head
    target, _ = load_model(inputs["target"], dtype=dtype, device=device)
    seqs = distil_sequences(read_jsonl(inputs["responses"]), max_len=data["max_len"],
                            prompt_loss=False)  # fmt: skip
    seqs = seqs[: data["sequences"]] if data.get("sequences") else seqs
    train_seqs, val = split_sequences(seqs, data["val_fraction"], seed)
    head = build_head(target, drafter).to(device)
    _check_depth(drafter, data["state_depth"])
    weights = HeadLoss(loss["lambda_kl"], loss["lambda_reg"], tuple(loss["periods"]))
    root = data["state_cache"] if data["cache_states"] else None
    cache = StateCache(root, target, weights_fingerprint(inputs["target"]), data["state_depth"],
                       getattr(torch, data["state_dtype"]))  # fmt: skip
    order = teacher_order(target, train_seqs, None)  # by count in the training responses
    readout = vocabulary_of(target, order, data.get("vocab"))
    t0 = time.perf_counter()
    spec = DistilSpec.from_config(train, seed)
    spec = replace(spec, dtype=resolve_dtype(spec.dtype, torch.device(device).type))
    curve = train_head(drafter["kind"], head, target, train_seqs, val, spec, weights, cache.get,
                       f"{out}.ckpt", readout=target_readout(target, readout))  # fmt: skip
    trainable, layer = trainable_parameters(head), decoder_layer_parameters(target)
    stats = {
        "draft_vocab": len(readout) if readout else target.config.vocab_size,
        "trainable_parameters": trainable,
        "target_decoder_layer_parameters": layer,
        "trainable_per_decoder_layer": trainable / layer,
        "sequences": {"train": len(train_seqs), "val": len(val)},
        "tokens_seen": curve[-1]["tokens"] if curve else 0,
        "processes": world,  # data-parallel processes that trained it
        "train_dtype": spec.dtype,
        "train_seconds_this_run": time.perf_counter() - t0,
        "state_cache": {
            "stored": cache.dir is not None,
            "hits": cache.hits,
            "misses": cache.misses,
            "bytes": cache.size_bytes(),
            "dtype": data["state_dtype"],
        },
        "final": {k: v for k, v in (curve[-1] if curve else {}).items() if k.startswith("val_")},
    }
    log.info("%s: %s", drafter["kind"], stats)
    if rank > 0:  # the first process writes
        return
    with atomic_path(out) as tmp:
        torch.save(to_cpu({"drafter": dict(drafter), "state": head.state_dict(),
                           "readout": readout, "order": torch.tensor(order, dtype=torch.int32),
                           "curve": curve, "stats": stats,
                           "provenance": provenance({"drafter": dict(drafter)})}), tmp)  # fmt: skip
    Path(f"{out}.ckpt").unlink(missing_ok=True)


def _check_depth(drafter: Mapping[str, Any], depth: int) -> None:
    tli = int(drafter.get("tli", 0)) if drafter["kind"] == "moa" else 0
    if tli > depth:
        raise ValueError(f"a head with TLI = {tli} needs moa.data.state_depth >= {tli}, "
                         f"not {depth}")  # fmt: skip


def neural_methods(setup: Any, heads: Mapping[str, tuple[nn.Module, Mapping[str, Any]]],
                   chain_k: int, tree: Mapping[str, int] | None) -> dict[str, Any]:  # fmt: skip
    """`<name>/chain` (≤ chain_k tokens) and, with `tree`, `<name>/tree` methods per head; a
    fresh drafter per prompt (drafters hold the state of one generation)."""
    methods = {}
    for name, (head, decl) in heads.items():
        methods[f"{name}/chain"] = _method(setup, head, decl["kind"], chain_k, None)
        if tree:
            methods[f"{name}/tree"] = _method(setup, head, decl["kind"], chain_k, tree)
    return methods


def vocab_sweep_methods(
    setup: Any,
    path: str,
    name: str,
    sizes: Sequence[int | None],
    chain_k: int,
    tree: Mapping[str, int] | None,
) -> dict[str, Any]:
    """`<name>/<mode>/vocab<N>` methods: head `name` (saved at `path`) drafting over the N
    tokens the target output most in its training responses (`full`: every token); tree
    drafting when `tree` is set, else chains. Greedy, so checked against greedy decoding."""
    methods = {}
    for size in sizes:
        head, decl = load_head(path, setup.target, vocab=size)
        method = f"{name}/{'tree' if tree else 'chain'}/vocab{size or 'full'}"
        methods[method] = _method(setup, head, decl["kind"], chain_k, tree)
    return methods


def _method(setup: Any, head: nn.Module, kind: str, k: int, tree: Mapping[str, int] | None) -> Any:
    from kvspec.decoding.bench import run_of_steps
    from kvspec.decoding.loop import speculative_generate
    from kvspec.decoding.tree import tree_generate

    def run(prompt: list[int], max_new_tokens: int | None = None) -> Any:
        drafter = make_drafter(kind, head, setup.target, tree)
        budget = max_new_tokens or setup.max_new_tokens
        t0 = time.perf_counter()
        if tree is None:
            tokens, steps = speculative_generate(setup.target, prompt, drafter, budget, k,
                                                 eos_token_id=setup.stops)  # fmt: skip
        else:
            tokens, steps = tree_generate(setup.target, prompt, drafter, budget, setup.stops)
        return run_of_steps(tokens, steps, time.perf_counter() - t0)

    return run


def make_drafter(kind: str, head: nn.Module, target: nn.Module,
                 tree: Mapping[str, int] | None) -> Any:  # fmt: skip
    """A greedy chain drafter (tree None) or an EAGLE-2 tree drafter for a trained head."""
    t = (tree["depth"], tree["topk"], tree["total"]) if tree else ()
    if kind == "moa":
        from kvspec.neural.moa import MoADrafter, MoATreeDrafter

        return MoATreeDrafter(head, target, *t) if tree else MoADrafter(head, target)
    if kind == "eagle":
        from kvspec.neural.eagle import EagleDrafter, EagleTreeDrafter

        return EagleTreeDrafter(head, target, *t) if tree else EagleDrafter(head, target)
    from kvspec.decoding.draft_model import DraftModelDrafter, ModelTreeDrafter

    return ModelTreeDrafter(head, *t) if tree else DraftModelDrafter(head)


def _methods_of_set(name: str, methods: Mapping[str, Any], ablations: Mapping[str, Any],
                    ablation_set: str | None,
                    chain_sets: Sequence[str] | None) -> dict[str, Any]:  # fmt: skip
    """The methods run on set `name`: chains of the main heads on `chain_sets` (None: all)
    and the ablation set, the ablation heads' chains on the ablation set only."""
    chains = chain_sets is None or name in chain_sets or name == ablation_set
    chosen = {m: fn for m, fn in methods.items() if chains or not m.endswith("/chain")}
    return {**chosen, **(ablations if name == ablation_set else {})}


def neural_bench_stage(
    inputs: Mapping[str, str],
    out_runs: str,
    out_summary: str,
    *,
    model: str,
    drafters: Sequence[str],
    ablations: Sequence[str],
    ablation_set: str | None,
    chain_sets: Sequence[str] | None,
    sets: Mapping[str, Mapping[str, Any]],
    baselines: Sequence[str],
    vocab_sweep: Mapping[str, Any] | None,
    decode: Mapping[str, Any],
    chain_k: int,
    tree: Mapping[str, int] | None,
    max_new_tokens: int,
    max_support: int,
    baseline_repeats: int,
    unstable_spread: float,
    device: str,
    dtype: str,
    linear: str,
    seed: int,
    threads: int,
    warmup_tokens: int | None = None,
) -> None:
    """Greedy, the `baselines` (speed-benchmark methods) and every head's tree method on every
    prompt set, its chain method on `chain_sets` (None: every set) and `ablation_set`, and the
    `ablations` heads' chain methods and `vocab_sweep`'s methods (`vocab_sweep_methods`: its
    `drafter` over each of its `sizes`) on `ablation_set` (`inputs`: `model`, `head_<drafter>`,
    `prompts_<set>`, indexes). Every method is warmed up, untimed, on its first set's first
    prompt to `warmup_tokens` new tokens (None: a full answer), the baselines that learn
    between calls by second instances."""
    from kvspec.data.records import read_jsonl
    from kvspec.decoding.bench import run_benchmark
    from kvspec.decoding.bench_summary import mark_divergence, summarize
    from kvspec.decoding.generate import stop_ids
    from kvspec.decoding.prompts import bench_prompts
    from kvspec.models.load import load_model, use_threads
    from kvspec.ngram.methods import (
        DecodeSettings,
        Setup,
        benchmark_methods,
        input_indexes,
        open_engines,
    )
    from kvspec.ngram.registry import method as declared

    use_threads(threads)
    target, tokenizer = load_model(inputs["model"], dtype=dtype, device=device, linear=linear)
    setup = Setup(target, stop_ids(target, tokenizer), max_new_tokens,
                  DecodeSettings.from_config(decode), seed=seed,
                  engines=open_engines(input_indexes(inputs), max_support))  # fmt: skip
    heads = {name: load_head(inputs[f"head_{name}"], target) for name in drafters}
    extra = {name: load_head(inputs[f"head_{name}"], target) for name in ablations}
    methods = {**benchmark_methods(setup, ["greedy", *baselines], ["greedy"]),
               **neural_methods(setup, heads, chain_k, tree)}  # fmt: skip
    ablation_methods = neural_methods(setup, extra, chain_k, None)
    if vocab_sweep:  # the sweep joins the ablation set
        name = vocab_sweep["drafter"]
        ablation_methods |= vocab_sweep_methods(setup, inputs[f"head_{name}"], name,
                                                vocab_sweep["sizes"], chain_k, tree)  # fmt: skip
    # the baselines that learn between calls warm up on second instances (an adaptive drafter
    # would otherwise start its timed run of a prompt having learnt from it); a head's method
    # drafts afresh every call
    fresh = benchmark_methods(setup, [b for b in baselines if declared(b).learns], ["greedy"])
    records, summaries, warm = [], [], set()
    for name, bench in sets.items():
        prompts = bench_prompts(read_jsonl(inputs[f"prompts_{name}"]), bench, tokenizer)
        chosen = _methods_of_set(name, methods, ablation_methods, ablation_set, chain_sets)
        for m in (m for m in chosen if m not in warm):  # methods joining on this set
            fresh.get(m, chosen[m])(prompts[0][1], warmup_tokens)  # untimed
        warm |= set(chosen)
        recs = run_benchmark(chosen, prompts, 1, baseline_repeats=baseline_repeats, warmup=False)
        mark_divergence(target, recs, prompts)
        records += [{**r, "set": name} for r in recs]
        summary = summarize(recs, unstable_spread=unstable_spread)
        summary.insert(0, "set", name)
        summaries.append(summary)
        log.info("%s\n%s", name, summary.to_string())
    meta = {"model": model, "drafters": list(drafters), "ablations": list(ablations),
            "ablation_set": ablation_set, "chain_sets": chain_sets, "chain_k": chain_k,
            "sets": {k: dict(v) for k, v in sets.items()}, "tree": dict(tree or {}),
            "baselines": list(baselines), "vocab_sweep": vocab_sweep}  # fmt: skip
    sizes = {n: head_stats(inputs[f"head_{n}"]) for n in [*drafters, *ablations]}  # the report
    write_json(out_runs, {"records": records, "heads": sizes, "provenance": provenance(meta)})
    write_text(out_summary, pd.concat(summaries, ignore_index=True).to_csv(index=False))
