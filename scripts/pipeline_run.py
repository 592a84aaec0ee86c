"""Rule pipeline_run: every pipeline strategy at every stage count, real processes, one job."""

from kvspec.logs import log_to
from kvspec.pipeline.stages import runs_stage

with log_to(snakemake.log[0]):
    p = snakemake.params
    runs_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        sets=p.sets,
        settings=p.settings,
        dtype=p.dtype,
        seed=p.seed,
        threads=snakemake.threads,
    )
