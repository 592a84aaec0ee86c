"""Rule pipeline_run: every pipeline strategy at every stage count, real processes, one job."""

from kvspec.logs import log_to
from kvspec.pipeline.stages import runs_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    runs_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        **job,
        threads=snakemake.threads,
    )
