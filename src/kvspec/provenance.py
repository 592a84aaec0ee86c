"""What produced a result: config hash, library versions, CPU/GPU and thread count.

Every stage attaches `provenance(...)` to its outputs (a JSON key, a safetensors metadata
string, a CSV comment line or `kvspec_provenance.json` in a model directory).
"""

from __future__ import annotations

import hashlib
import json
import platform
from typing import Any


def config_hash(obj: Any) -> str:
    """Short stable hash of a JSON-serialisable config fragment."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def provenance(config: Any = None, **extra: Any) -> dict[str, Any]:
    """What produced a result: config hash, library versions, CPU/GPU and thread count."""
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    record: dict[str, Any] = {
        "config_hash": config_hash(config) if config is not None else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "gpu": gpu,
        "threads": torch.get_num_threads(),
    }
    record.update(extra)
    return record
