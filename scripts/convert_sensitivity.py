"""Rule convert_sensitivity: a Figure 3.1 rank plan (one layer halved, or one SV group removed)."""

from kvspec.care.plans import sensitivity_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    sensitivity_stage(
        snakemake.input[0], snakemake.wildcards.plan, snakemake.params.opts, snakemake.output[0]
    )
