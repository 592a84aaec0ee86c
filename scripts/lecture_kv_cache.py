"""Rule lecture_kv_cache: KV-cache bytes per token, formulas beside real caches."""

from kvspec.lecture.stages import kv_cache_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    kv_cache_stage(
        job["models"],
        snakemake.output[0],
        settings=job["settings"],
        seed=job["seed"],
        device=job["device"],
        dtype=job["dtype"],
        threads=snakemake.threads,
    )
