"""Rule convert_factorize: full-rank factors and spectra of every K/V matrix for one method."""

from kvspec.care.pipeline import factorize_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    factorize_stage(
        snakemake.input.model,
        snakemake.input.get("stats"),
        snakemake.output[0],
        method=snakemake.wildcards.fact,
        **job,
        threads=snakemake.threads,
    )
