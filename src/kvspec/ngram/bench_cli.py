"""Speed check of infini-gram speculative decoding, printed as ratios measured in one run.

    python -m kvspec.ngram.bench_cli [--results results] [--model target] [--n 10]

Needs a finished workflow run (the model, its target-response index and the HumanEval
records under `--results`). Prints
1. draft latency of `inf_nkt` for 16 tokens at max_support 1000 with the decode
   configuration (`--min-match`, `--confidence`), as `kvspec.ngram.latency` measures it for
   the workflow's `specdecode_draft_latency` rule;
2. the cost of a verification forward of q = 1, 2, 4, 8, 16, 24 positions after a HumanEval
   prompt, as a multiple of a one-position forward (`kvspec.decoding.verify_cost`);
3. end-to-end tokens/s of infini-gram SD over plain greedy decoding and over Hugging Face
   prompt lookup on the HumanEval subset, with accepted length and where the time goes
   (`--methods` adds others, e.g. sd_hybrid_target_tree).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from kvspec.config import schema_defaults
from kvspec.data.records import read_jsonl
from kvspec.decoding.bench import run_benchmark
from kvspec.decoding.bench_summary import mark_divergence, summarize
from kvspec.decoding.generate import stop_ids
from kvspec.decoding.prompts import bench_prompts
from kvspec.decoding.verify_cost import verify_costs
from kvspec.io import read_json
from kvspec.models.load import load_model
from kvspec.ngram.drafters import InfiniGramDrafter
from kvspec.ngram.index import open_engine
from kvspec.ngram.latency import draft_latency
from kvspec.ngram.methods import DecodeSettings, Setup, benchmark_methods
from kvspec.ngram.registry import method


def _responses(results: Path, model: str, n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, response ids) of n random held-out target responses (never indexed)."""
    rng = np.random.default_rng(seed)
    held = [
        r
        for r in read_jsonl(results / "generate" / model / "responses.jsonl")
        if r["split"] != "index"
    ]
    picks = rng.choice(len(held), size=min(n, len(held)), replace=False)
    return [(list(held[i]["prompt_ids"]), list(held[i]["response_ids"])) for i in sorted(picks)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--results", default="results", type=Path, help="the workflow's results directory"
    )
    ap.add_argument("--model", default="target", help="target model name")
    ap.add_argument("--index", default="responses_1", help="index under results/ngram/<model>/")
    ap.add_argument("--n", type=int, default=10, help="HumanEval prompts")
    ap.add_argument("--responses", type=int, default=20, help="held-out responses timed")
    ap.add_argument("--min-match", type=int, default=1, help="as spec.decode.min_match")
    ap.add_argument("--confidence", type=float, default=0.0, help="as spec.decode.confidence")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=8, help="draft depth in the end-to-end runs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="float32", help="the target's weights: float32, bfloat16")
    ap.add_argument("--methods", nargs="*", default=[], help="further methods (greedy only)")
    args = ap.parse_args(argv)

    res = args.results
    stats = read_json(res / "ngram" / args.model / f"{args.index}.json")
    engine = open_engine(
        res / "ngram" / args.model / args.index, stats["vocab_size"], stats["eos_token_id"], 1000
    )
    lat = draft_latency(
        lambda: InfiniGramDrafter(engine, min_match=args.min_match, confidence=args.confidence),
        _responses(res, args.model, args.responses, 0),
        16,
        100,
    )
    bpt = stats["bytes_per_token"]
    width = stats.get("token_dtype", "?") + (" compact" if stats.get("compact_vocab") else "")
    print(f"index {args.index}: {stats['n_tokens']} tokens, {bpt:.2f} bytes/token, {width} ids")
    print(f"inf_nkt, 16 tokens, max_support 1000, min_match {args.min_match}:")
    for name in ("decode", "lookup", "sequential"):
        t = lat[name]
        print(f"  {name:10s} p50 {t['p50_ms']:.2f} ms, p90 {t['p90_ms']:.2f} ms ({t['n']} drafts)")
    ratio = lat["sequential"]["p50_ms"] / lat["lookup"]["p50_ms"]
    print(f"inf_nkt (cold lookup) speedup over sequential calls (median): {ratio:.1f}x")

    torch.set_num_threads(args.threads)
    target, tokenizer = load_model(res / "models" / args.model, dtype=args.dtype)
    decode = {
        **schema_defaults("spec", "decode"),
        "k": args.k,
        "min_match": args.min_match,
        "confidence": args.confidence,
    }
    setup = Setup(target, stop_ids(target, tokenizer), args.max_new_tokens,
                  DecodeSettings.from_config(decode), engines={"target": engine})  # fmt: skip
    bench = {"name": "humaneval", "prompts": "humaneval", "n": args.n, "kind": "code"}
    prompts = bench_prompts(read_jsonl(res / "data" / "humaneval.jsonl"), bench, tokenizer)
    costs = verify_costs(target, prompts[0][1], (1, 2, 4, 8, 16, 24))
    print("\nverification forward after a HumanEval prompt, median of 9 (x one position):")
    print(
        "  " + ", ".join(f"q={q}: {1e3 * t:.1f} ms ({t / costs[1]:.2f}x)" for q, t in costs.items())
    )
    names = ["greedy", "hf_prompt_lookup", "sd_infgram_target", *args.methods]
    methods = benchmark_methods(setup, names, ["greedy"])
    speed = schema_defaults("spec", "speed")
    learners = [n for n in names if method(n).learns]  # warmed up on second instances
    fresh = benchmark_methods(setup, learners, ["greedy"])
    records = run_benchmark(methods, prompts, warmup_tokens=speed["warmup_tokens"],
                            warmup_methods=fresh)  # fmt: skip
    mark_divergence(target, records, prompts)
    summary = summarize(records, unstable_spread=speed["unstable_spread"])
    summary = summary.set_index("method")
    sd, greedy, hf = (summary.loc[m] for m in ("sd_infgram_target", "greedy", "hf_prompt_lookup"))
    print(f"\nHumanEval, {args.n} prompts, {args.max_new_tokens} new tokens, batch 1, k={args.k}:")
    for name, row in summary.iterrows():
        print(f"  {name:18s} {row.tok_s:8.1f} tok/s  accepted length {row.accept_len:.2f}  "
              f"equal to greedy on {100 * row.exact_vs_greedy:.0f}% of prompts")  # fmt: skip
    print(f"infini-gram SD / greedy:           {sd.tok_s / greedy.tok_s:.2f}x")
    print(f"infini-gram SD / HF prompt lookup: {sd.tok_s / hf.tok_s:.2f}x")
    print(
        f"infini-gram SD time split: draft {100 * sd.draft_share:.1f}%, "
        f"verify {100 * sd.verify_share:.1f}%, overhead {100 * sd.overhead_share:.1f}%"
    )


if __name__ == "__main__":
    main()
