"""Rule generate_gather: concatenate the response shards of one model in order."""

from kvspec.logs import log_to
from kvspec.ngram.stages import gather_stage

with log_to(snakemake.log[0]):
    gather_stage(list(snakemake.input), snakemake.output[0])
