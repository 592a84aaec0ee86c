"""Rule moa_quality: Table 8's scores of every method's decoded answers."""

from kvspec.logs import log_to
from kvspec.neural.quality import quality_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    quality_stage(
        dict(snakemake.input.items()),
        snakemake.output.runs,
        snakemake.output.summary,
        **job,
    )
