"""Rule convert_factorize: full-rank factors and spectra of every K/V matrix for one method."""

import torch

from kvspec.care.pipeline import factorize_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    torch.set_num_threads(snakemake.threads)
    factorize_stage(
        snakemake.input.model,
        snakemake.wildcards.fact,
        snakemake.input.get("stats"),
        snakemake.params.opts,
        snakemake.params.seed,
        snakemake.output[0],
        snakemake.params.dtype,
    )
