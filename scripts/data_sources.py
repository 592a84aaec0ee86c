"""Rule data_sources: one report table of every dataset, its origin, size and substitutions."""

from kvspec.logs import log_to
from kvspec.report.data import render_sources

with log_to(snakemake.log[0]):
    render_sources(
        list(snakemake.input), snakemake.params.notes, snakemake.output.csv, snakemake.output.md
    )
