"""Rule convert_decode_speed: decode tok/s of the GQA original vs its MLA conversions."""

from kvspec.care.decode_speed import decode_speed_stage
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    p = snakemake.params
    decode_speed_stage(
        p.models,
        snakemake.output[0],
        contexts=p.settings["contexts"],
        new_tokens=p.settings["new_tokens"],
        repeats=p.settings["repeats"],
        seed=p.seed,
        device=p.device,
        dtype=p.dtype,
        threads=snakemake.threads,
    )
