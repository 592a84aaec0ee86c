"""Rule generate_prompts: SFT prompts of the study, split into index and held-out sets."""

import json

from kvspec.data.records import read_jsonl
from kvspec.io import atomic_path
from kvspec.logs import log_to
from kvspec.spec.prompts import select_prompts

with log_to(snakemake.log[0]) as log:
    sources = {name: read_jsonl(path, "instruction") for name, path in snakemake.input.items()}
    p = snakemake.params
    prompts = select_prompts(sources, p.heldout, p.seed, p.limit)
    with atomic_path(snakemake.output[0]) as tmp, open(tmp, "w") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in prompts)
    log.info("%d prompts (%d held out)", len(prompts), sum(r["split"] != "index" for r in prompts))
