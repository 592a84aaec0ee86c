"""Rule convert_mla: build the latent-KV model of one rank plan and save it (save_pretrained)."""

from kvspec.care.pipeline import convert_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    convert_stage(
        snakemake.input.model,
        snakemake.input.factors,
        snakemake.input.plan,
        snakemake.output[0],
        threads=snakemake.threads,
    )
