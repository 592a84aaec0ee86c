"""Rule moa_batching: Figure 4, throughput against batch size under continuous batching."""

from kvspec.logs import log_to
from kvspec.neural.batching import batching_stage

with log_to(snakemake.log[0]):
    batching_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        **snakemake.params.job,
        threads=snakemake.threads,
    )
