"""Rule specdecode_draft_quality: a draft's accepted length and cost relative to its target."""

from kvspec.logs import log_to
from kvspec.ngram.stages import draft_quality_stage

with log_to(snakemake.log[0]):
    p = snakemake.params
    draft_quality_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        model=snakemake.wildcards.model,
        sets=p.sets,
        settings=p.settings,
        device=p.device,
        dtype=p.dtype,
        seed=p.seed,
        threads=snakemake.threads,
    )
