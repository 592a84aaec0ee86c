"""Rule heal_restore: full MLA restoration (DeepSeek-V3 layout) of one model."""

import torch

from kvspec.care.heal_stages import restore_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    torch.set_num_threads(snakemake.threads)
    restore_stage(
        snakemake.input.model,
        snakemake.input.stats,
        snakemake.wildcards.method,
        snakemake.params.rank,
        snakemake.params.freqfold,
        snakemake.params.opts,
        snakemake.output[0],
    )
