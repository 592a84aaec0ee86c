"""Rule convert_allocate: per-matrix ranks (uniform or water-filling) for one average rank."""

from kvspec.care.plans import allocate_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    allocate_stage(
        snakemake.input[0],
        snakemake.wildcards.alloc,
        int(snakemake.wildcards.rank),
        snakemake.output[0],
        bounds=snakemake.params.job["bounds"],
    )
