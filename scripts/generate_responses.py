"""Rule generate_responses: one shard of a model's greedy responses."""

from kvspec.logs import log_to
from kvspec.ngram.stages import responses_stage

with log_to(snakemake.log[0]):
    p = snakemake.params
    responses_stage(
        snakemake.input.prompts,
        snakemake.input.model,
        snakemake.output[0],
        shard=int(snakemake.wildcards.shard),
        shards=p.shards,
        fraction=p.fraction,
        heldout=p.heldout,
        max_new_tokens=p.max_new_tokens,
        batch_size=p.batch_size,
        device=p.device,
        dtype=p.dtype,
        threads=snakemake.threads,
        checkpoint=p.checkpoint,
    )
