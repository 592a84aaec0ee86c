"""Rules report_heal_*: Table 3.3 beside the thesis's numbers, and the convergence figure."""

from kvspec.logs import log_to
from kvspec.report.heal import render

with log_to(snakemake.log[0]):
    render(
        snakemake.params.item,
        snakemake.params.spec,
        list(snakemake.input.get("paper", [])),
        dict(snakemake.output.items()),
    )
