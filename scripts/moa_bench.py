"""Rule moa_bench: every drafter (chain and tree) beside greedy and the n-gram baselines."""

from kvspec.logs import log_to
from kvspec.neural.heads import neural_bench_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    neural_bench_stage(
        dict(snakemake.input.items()),
        snakemake.output.runs,
        snakemake.output.summary,
        model=snakemake.wildcards.model,
        sets=job["sets"],
        device=job["device"],
        dtype=job["dtype"],
        linear=job["linear"],
        seed=job["seed"],
        threads=snakemake.threads,
        **job["settings"],
    )
