"""Rule specdecode_speed: every decoding method on one benchmark set, side by side."""

from kvspec.logs import log_to
from kvspec.ngram.stages import speed_stage

with log_to(snakemake.log[0]):
    p = snakemake.params
    speed_stage(
        dict(snakemake.input.items()),
        snakemake.output.runs,
        snakemake.output.summary,
        model=snakemake.wildcards.model,
        methods=p.methods,
        bench=p.bench,
        decode=p.decode,
        max_new_tokens=p.max_new_tokens,
        repeats=p.repeats,
        baseline_repeats=p.baseline_repeats,
        unstable_spread=p.unstable_spread,
        max_support=p.max_support,
        device=p.device,
        dtype=p.dtype,
        seed=p.seed,
        threads=snakemake.threads,
    )
