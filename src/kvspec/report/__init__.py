"""Report items: every table and figure, our numbers beside the documents'.

Every renderer has one signature, `fn(item, inputs, outputs)`: `item` says what each row
means (from `kvspec.plan`), `inputs` maps input groups to file lists (e.g. the paper's CSV),
`outputs` maps output keys to paths. The report layer never imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def render(
    renderer: str,
    item: Mapping[str, Any],
    inputs: Mapping[str, Any],
    outputs: Mapping[str, str],
) -> None:
    """Call `kvspec.report.<module>.<function>` named by `renderer` ("module:function")."""
    module, _, function = renderer.partition(":")
    fn = getattr(importlib.import_module(f"kvspec.report.{module}"), function)
    groups = {k: [v] if isinstance(v, str) else list(v) for k, v in inputs.items()}
    fn(item, groups, dict(outputs))
