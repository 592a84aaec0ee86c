"""Rule models_fetch: download a hub model once and save it (model + tokenizer) locally."""

from kvspec.logs import log_to
from kvspec.models.fetch import fetch_model

with log_to(snakemake.log[0]):
    fetch_model(snakemake.params.hub, snakemake.output[0], snakemake.params.dtype)
