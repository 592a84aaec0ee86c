"""Rule sampling_humaneval: HumanEval pass@k of one decoding method (Figures 6, 8, 9)."""

from kvspec.logs import log_to
from kvspec.sampling.stages import humaneval_stage

with log_to(snakemake.log[0]):
    p = snakemake.params
    humaneval_stage(
        p.models,
        snakemake.input.problems,
        snakemake.output[0],
        target=p.target,
        label=snakemake.wildcards.method,
        method=p.method,
        settings=p.settings,
        seed=p.seed,
        device=p.device,
        dtype=p.dtype,
        threads=snakemake.threads,
    )
