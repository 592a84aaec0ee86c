"""Rule lecture_kv_cache: KV-cache bytes per token, formulas beside real caches."""

from kvspec.lecture.stages import kv_cache_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    p = snakemake.params
    kv_cache_stage(
        p.models,
        snakemake.output[0],
        settings=p.settings,
        seed=p.seed,
        device=p.device,
        dtype=p.dtype,
        threads=snakemake.threads,
    )
