"""Rule convert_sensitivity: a Figure 3.1 rank plan (one layer halved, or one SV group removed)."""

from kvspec.care.plans import sensitivity_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    sensitivity_stage(
        snakemake.input[0], snakemake.wildcards.plan, job["opts"], snakemake.output[0]
    )
