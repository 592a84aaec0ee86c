"""Rule specdecode_speed: every decoding method on one benchmark set, side by side."""

from kvspec.data.records import read_jsonl
from kvspec.io import provenance, write_json, write_text
from kvspec.logs import log_to
from kvspec.spec.bench import (
    Setup,
    bench_prompts,
    benchmark_methods,
    mark_divergence,
    open_engines,
    run_benchmark,
    summarize,
)  # fmt: skip
from kvspec.spec.generate import load_model, stop_ids

with log_to(snakemake.log[0]) as log:
    p, inp = snakemake.params, snakemake.input
    named = set(inp.keys())  # Snakemake's InputFiles is a list: `in inp` tests file paths
    target, tokenizer = load_model(inp.model, p.device, p.dtype, snakemake.threads)
    draft = (
        load_model(inp.draft, p.device, p.dtype, snakemake.threads)[0] if "draft" in named else None
    )
    indexes = {
        name: (inp[f"index_{name}"], inp[f"index_{name}_stats"])
        for name in ("sft", "target")
        if f"index_{name}" in named
    }
    engines = open_engines(indexes, p.max_support)
    setup = Setup.from_decode(target, stop_ids(target, tokenizer), p.max_new_tokens, p.decode,
                              seed=p.seed, draft=draft, engines=engines)  # fmt: skip
    prompts = bench_prompts(read_jsonl(inp.prompts), p.bench, tokenizer)
    methods = benchmark_methods(setup, p.methods, p.decode["modes"])
    records = run_benchmark(methods, prompts, p.repeats)
    mark_divergence(target, records, prompts)
    summary = summarize(records)
    log.info("\n%s", summary.to_string())
    meta = {"model": snakemake.wildcards.model, "bench": p.bench, "decode": p.decode}
    meta["methods"] = p.methods
    write_json(snakemake.output.runs, {"records": records, "provenance": provenance(meta)})
    write_text(snakemake.output.summary, summary.to_csv(index=False))
