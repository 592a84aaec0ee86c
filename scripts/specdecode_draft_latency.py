"""Rule specdecode_draft_latency: inf_nkt draft latency on the target-response index."""

from kvspec.logs import log_to
from kvspec.ngram.stages import draft_latency_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    draft_latency_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        model=snakemake.wildcards.model,
        **job,
    )
