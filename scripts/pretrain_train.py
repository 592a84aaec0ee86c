"""Rule pretrain_train: build and train one stand-in model; save it, its curve and stats."""

import numpy as np
import pandas as pd
import torch

from kvspec.io import provenance, write_json, write_text
from kvspec.logs import log_to
from kvspec.models.pretrain import pretrain_model

with log_to(snakemake.log[0]):
    torch.set_num_threads(snakemake.threads)
    spec = snakemake.params.spec
    curve, stats = pretrain_model(
        spec["arch"],
        spec["train"],
        snakemake.params.seed,
        snakemake.input.tokenizer,
        np.load(snakemake.input.train),
        np.load(snakemake.input.val),
        snakemake.output.model,
        checkpoint=snakemake.params.checkpoint,
    )
    write_text(snakemake.output.curve, pd.DataFrame(curve).to_csv(index=False))
    write_json(snakemake.output.stats, {**stats, "provenance": provenance(spec)})
