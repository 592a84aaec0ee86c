"""Rule models_gguf: a packaged model's own GGUF file (installed, assembled, checked), for
llama.cpp's rows of the speed benchmark."""

from kvspec.logs import log_to
from kvspec.models.packaged import export_gguf

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    export_gguf(snakemake.wildcards.model, job["gguf"], snakemake.output[0], job["packages_dir"])
