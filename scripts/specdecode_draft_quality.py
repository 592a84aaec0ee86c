"""Rule specdecode_draft_quality: a draft's accepted length and cost relative to its target."""

from kvspec.logs import log_to
from kvspec.ngram.stages import draft_quality_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    draft_quality_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        model=snakemake.wildcards.model,
        **job,
        threads=snakemake.threads,
    )
