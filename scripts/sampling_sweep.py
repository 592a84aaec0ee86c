"""Rule sampling_sweep: the draft-length x temperature sweep (document 004, Figures 1-4)."""

from kvspec.logs import log_to
from kvspec.sampling.stages import sweep_stage

with log_to(snakemake.log[0]):
    p = snakemake.params
    sweep_stage(
        p.models,
        snakemake.input.problems,
        snakemake.output[0],
        target=p.target,
        method=p.method,
        settings=p.settings,
        seed=p.seed,
        device=p.device,
        dtype=p.dtype,
        threads=snakemake.threads,
    )
