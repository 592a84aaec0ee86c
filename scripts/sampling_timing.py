"""Rule sampling_timing: time per token of every method side by side (Figures 5, 7, 10)."""

from kvspec.logs import log_to
from kvspec.sampling.stages import timing_stage

with log_to(snakemake.log[0]):
    p = snakemake.params
    timing_stage(
        p.models,
        snakemake.input.problems,
        snakemake.output[0],
        target=p.target,
        methods=p.methods,
        settings=p.settings,
        seed=p.seed,
        device=p.device,
        dtype=p.dtype,
        threads=snakemake.threads,
    )
