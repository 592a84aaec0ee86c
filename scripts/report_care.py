"""Rules report_care_*: one CARE table or figure, beside the thesis's numbers."""

from kvspec.logs import log_to
from kvspec.report.care import render

with log_to(snakemake.log[0]):
    render(
        snakemake.params.item,
        snakemake.params.spec,
        list(snakemake.input.paper),
        dict(snakemake.output.items()),
    )
