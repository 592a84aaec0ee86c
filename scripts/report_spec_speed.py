"""Rule report_spec_speed: thesis Tables 4.7 and 4.8."""

from kvspec.logs import log_to
from kvspec.report.spec import render_speed

with log_to(snakemake.log[0]):
    inp, p = snakemake.input, snakemake.params
    paper = {"t4_7": inp.t4_7, "t4_8": inp.t4_8}
    render_speed(inp.main, inp.other, paper, dict(snakemake.output.items()), p.columns, p.labels)
