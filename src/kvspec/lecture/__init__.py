"""The lecture notes' worked examples (`001_…txt`), measured on the study's models.

One module per example: `roofline` (arithmetic intensity and this machine's roofline),
`batching` (latency, throughput and TTFT), `kv_cache` (bytes per token by attention variant),
`quantize` (RTN, mixed precision and AWQ scaling), `spec_example` (speculative sampling's
worked example, exactness and expected accepted length) and `scheduler` (continuous vs static
batching over a real KV cache). `stages` holds the rule-facing functions.
"""
