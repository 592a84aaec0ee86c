"""Rule lecture_batching: decode latency/throughput per batch size, TTFT per prompt length."""

from kvspec.lecture.stages import batching_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    batching_stage(
        snakemake.input.model,
        snakemake.input.roofline,
        snakemake.output[0],
        **job,
        threads=snakemake.threads,
    )
