"""Rule pipeline_simulate: the simulator validated on the real runs, then swept."""

from kvspec.logs import log_to
from kvspec.pipeline.stages import simulation_stage

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    simulation_stage(snakemake.input[0], snakemake.output[0], settings=job["settings"])
