"""Rule report_pretrain: loss curves figure and summary table of the stand-in models."""

from kvspec.logs import log_to
from kvspec.report.pretrain import render

with log_to(snakemake.log[0]):
    render(
        snakemake.params.models,
        list(snakemake.input.curves),
        list(snakemake.input.stats),
        snakemake.input.tokens,
        dict(snakemake.output.items()),
    )
