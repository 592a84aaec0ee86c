"""Rule report_spec_acceptance: thesis Tables 4.1-4.6 and Figure 4.1."""

from kvspec.logs import log_to
from kvspec.report.spec import render_acceptance

with log_to(snakemake.log[0]):
    inp = snakemake.input
    paper = {k: v for k, v in inp.items() if k.startswith("t4_")}
    render_acceptance(
        inp.sweep,
        inp.stats,
        inp.main,
        paper,
        dict(snakemake.output.items()),
        snakemake.params.settings,
    )
