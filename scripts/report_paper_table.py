"""Rule report_table_*: a table with nothing to measure, rendered from the paper's CSV."""

from kvspec.logs import log_to
from kvspec.report.tables import render_paper_only

with log_to(snakemake.log[0]):
    render_paper_only(snakemake.input.paper, snakemake.output.csv, snakemake.output.md)
