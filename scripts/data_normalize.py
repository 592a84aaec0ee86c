"""Rule data_normalize: read one dataset (package, mirror or hub) and write normalized JSONL."""

from kvspec.data.load import load_dataset
from kvspec.data.records import write_jsonl
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    spec = snakemake.params.spec
    records = load_dataset(snakemake.wildcards.dataset, spec, snakemake.params.mirror)
    write_jsonl(snakemake.output[0], records, spec["kind"])
