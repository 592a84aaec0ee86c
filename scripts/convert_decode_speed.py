"""Rule convert_decode_speed: decode tok/s of the GQA original vs its MLA conversions."""

from kvspec.care.decode_speed import decode_speed_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    decode_speed_stage(
        job["models"],
        snakemake.output[0],
        contexts=job["settings"]["contexts"],
        new_tokens=job["settings"]["new_tokens"],
        repeats=job["settings"]["repeats"],
        seed=job["seed"],
        device=job["device"],
        dtype=job["dtype"],
        linear=job["linear"],
        threads=snakemake.threads,
        restored=job["restored"],
    )
