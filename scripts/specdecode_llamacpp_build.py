"""Rule specdecode_llamacpp_build: llama-cpp-python built from its source release."""

from pathlib import Path

from kvspec.logs import log_to
from kvspec.ngram.llamacpp_peer import build_llama_cpp

with log_to(snakemake.log[0]):
    build_llama_cpp(Path(snakemake.output[0]), threads=snakemake.threads)
