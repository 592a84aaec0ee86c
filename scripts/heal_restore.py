"""Rule heal_restore: full MLA restoration (DeepSeek-V3 layout) of one model."""

from kvspec.care.heal_stages import restore_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    p = snakemake.params
    restore_stage(
        snakemake.input.model,
        snakemake.input.stats,
        snakemake.output[0],
        method=snakemake.wildcards.method,
        rank=p.rank,
        freqfold=p.freqfold,
        factorize_opts=p.opts,
        cache=p.cache,
        rope_width=p.rope_width,
        schedule=p.schedule,
        threads=snakemake.threads,
    )
