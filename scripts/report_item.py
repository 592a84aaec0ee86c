"""Report rules (report.smk): render one table or figure of the plan's report items."""

from kvspec.logs import log_to
from kvspec.report import render

with log_to(snakemake.log[0]):
    render(snakemake.params.renderer, snakemake.params.item, snakemake.input, snakemake.output)
