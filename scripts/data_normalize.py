"""Rule data_normalize: one declared dataset -> normalized JSONL + where it came from."""

from kvspec.data.load import normalize_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    normalize_stage(
        snakemake.wildcards.dataset,
        snakemake.params.decl,
        snakemake.params.mirror,
        snakemake.output.data,
        snakemake.output.meta,
    )
