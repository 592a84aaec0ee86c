"""Rule generate_gather: concatenate the response shards of one model in order."""

from kvspec.logs import log_to
from kvspec.spec.generate import gather_shards

with log_to(snakemake.log[0]) as log:
    n = gather_shards(list(snakemake.input), snakemake.output[0])
    log.info("%d responses gathered from %d shards", n, len(snakemake.input))
