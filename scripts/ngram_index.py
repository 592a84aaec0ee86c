"""Rule ngram_index: an infini-gram index over SFT or target responses; build time, bytes/token."""

from kvspec.logs import log_to
from kvspec.ngram.stages import index_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    index_stage(
        snakemake.input.corpus,
        snakemake.input.model,
        corpus=snakemake.wildcards.corpus,
        **job,
        out_index=snakemake.output.index,
        out_stats=snakemake.output.stats,
        cpus=snakemake.threads,
    )
