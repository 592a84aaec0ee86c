"""Rule convert_mla: build the latent-KV model of one rank plan and save it (save_pretrained)."""

import torch

from kvspec.care.pipeline import convert_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    torch.set_num_threads(snakemake.threads)
    convert_stage(
        snakemake.input.model, snakemake.input.factors, snakemake.input.plan, snakemake.output[0]
    )
