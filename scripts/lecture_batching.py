"""Rule lecture_batching: decode latency/throughput per batch size, TTFT per prompt length."""

from kvspec.lecture.stages import batching_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    p = snakemake.params
    batching_stage(
        snakemake.input.model,
        snakemake.input.roofline,
        snakemake.output[0],
        settings=p.settings,
        seed=p.seed,
        device=p.device,
        dtype=p.dtype,
        threads=snakemake.threads,
    )
