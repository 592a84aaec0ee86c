"""Rule lecture_paged: PagedAttention's blocks, fragmentation and copy-on-write."""

from kvspec.lecture.stages import paged_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    paged_stage(
        dict(snakemake.input.items()),
        snakemake.output[0],
        **job,
        threads=snakemake.threads,
    )
