"""Rule lecture_scheduling: static vs continuous batching on one stream of requests."""

from kvspec.lecture.stages import scheduling_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    scheduling_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        **job,
        threads=snakemake.threads,
    )
