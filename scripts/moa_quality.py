"""Rule moa_quality: Table 8's scores of every method's decoded answers."""

from kvspec.logs import log_to
from kvspec.neural.quality import quality_stage

with log_to(snakemake.log[0]):
    quality_stage(
        dict(snakemake.input.items()),
        snakemake.output.runs,
        snakemake.output.summary,
        quality=snakemake.params.quality,
        max_new_tokens=snakemake.params.max_new_tokens,
    )
