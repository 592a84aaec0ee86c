"""Rule data_normalize: one declared dataset -> normalized JSONL + where it came from."""

from kvspec.data.load import normalize_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    normalize_stage(
        snakemake.wildcards.dataset,
        job["decl"],
        job["mirror"],
        snakemake.output.data,
        snakemake.output.meta,
    )
