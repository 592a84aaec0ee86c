"""Rule data_normalize: read one dataset (package, mirror or hub) and write normalized JSONL,
plus a sidecar saying where it came from."""

from kvspec.data.load import load_with_origin
from kvspec.data.records import write_jsonl
from kvspec.io import provenance, write_json
from kvspec.logs import log_to

with log_to(snakemake.log[0]):
    name, spec = snakemake.wildcards.dataset, snakemake.params.spec
    records, origin = load_with_origin(name, spec, snakemake.params.mirror)
    n = write_jsonl(snakemake.output.data, records, spec["kind"])
    meta = {
        "dataset": name,
        "kind": spec["kind"],
        "records": n,
        "origin": origin,
        "eval": spec["eval"],
        "provenance": provenance(spec),
    }
    write_json(snakemake.output.meta, meta)
