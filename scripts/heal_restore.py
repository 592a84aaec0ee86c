"""Rule heal_restore: full MLA restoration (DeepSeek-V3 layout) of one model."""

from kvspec.care.heal_stages import restore_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    restore_stage(
        snakemake.input.model,
        snakemake.input.stats,
        snakemake.output[0],
        **job["settings"],
        factorize_opts=job["opts"],
        threads=snakemake.threads,
    )
