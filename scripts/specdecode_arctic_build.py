"""Rule specdecode_arctic_build: Arctic Inference's suffix tree from its source release."""

from pathlib import Path

from kvspec.logs import log_to
from kvspec.ngram.suffix_peer import build_arctic_suffix

with log_to(snakemake.log[0]):
    build_arctic_suffix(Path(snakemake.output[0]), threads=snakemake.threads)
