#!/usr/bin/env bash
# Run by Snakemake inside the new environment, from the workflow's working directory.
# Installs the kvspec package from the repository (KVSPEC_REPO, default: the working
# directory) without dependencies: the environment file pins them.
set -euo pipefail
pip install --no-deps -e "${KVSPEC_REPO:-$PWD}"
