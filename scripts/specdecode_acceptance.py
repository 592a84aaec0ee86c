"""Rule specdecode_acceptance: per-position acceptance of one index on one held-out set."""

from kvspec.logs import log_to
from kvspec.ngram.stages import acceptance_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    inp, p, w = snakemake.input, snakemake.params, snakemake.wildcards
    acceptance_stage(
        inp.model,
        inp.index,
        inp.index_stats,
        inp.outputs,
        snakemake.output[0],
        heldout=w.heldout,
        responder=w.responder,
        **job,
        threads=snakemake.threads,
    )
