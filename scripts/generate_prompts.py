"""Rule generate_prompts: SFT prompts of the study, split into index and held-out sets."""

from kvspec.logs import log_to
from kvspec.ngram.stages import prompts_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    prompts_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        **job,
    )
