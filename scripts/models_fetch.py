"""Rule models_fetch: download a hub model once and save it (model + tokenizer) locally."""

from kvspec.logs import log_to
from kvspec.models.fetch import fetch_model

with log_to(snakemake.log[0]):
    job = snakemake.params.job
    fetch_model(job["hub"], snakemake.output[0], job["dtype"])
