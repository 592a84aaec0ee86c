"""Send a stage's logging and progress bars (stderr) to its rule log file."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def log_to(path: str | os.PathLike[str] | None) -> Iterator[logging.Logger]:
    """Within the block, logging and stderr (tqdm) go to `path`; exceptions are logged too."""
    if path is None:
        yield logging.getLogger("kvspec")
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", buffering=1) as fh, contextlib.redirect_stderr(fh):
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield logging.getLogger("kvspec")
        except BaseException:
            logging.getLogger("kvspec").exception("stage failed")
            raise
        finally:
            root.removeHandler(handler)
            sys.stderr.flush()
