"""Rule generate_responses: one shard of a model's greedy responses."""

from kvspec.logs import log_to
from kvspec.ngram.stages import responses_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    responses_stage(
        snakemake.input.prompts,
        snakemake.input.model,
        snakemake.output[0],
        shard=int(snakemake.wildcards.shard),
        **job,
        threads=snakemake.threads,
    )
