"""The study's side of vLLM generation: a `kvspec.decoding.vllm_generate` process started once
per job in the vLLM environment (`python`), asked for one chunk of prompts at a time."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvspec.decoding.vllm_generate import DONE


class VllmGenerator:
    """Greedy generation of token-id prompts by a vLLM process (context manager)."""

    def __init__(self, model_dir: str, *, dtype: str, python: str, tensor_parallel: int,
                 max_model_len: int, eager: bool = False) -> None:  # fmt: skip
        self.tmp = Path(tempfile.mkdtemp(prefix="kvspec-vllm-"))
        settings = self.tmp / "settings.json"
        settings.write_text(json.dumps({"model": str(model_dir), "dtype": dtype,
                                        "tensor_parallel": tensor_parallel,
                                        "max_model_len": max_model_len,
                                        "enforce_eager": eager}))  # fmt: skip
        src = str(Path(__file__).resolve().parents[2])  # the module alone, not kvspec's deps
        env = {**os.environ, "PYTHONPATH": src, "VLLM_CONFIGURE_LOGGING": "1"}
        self.proc = subprocess.Popen([python, "-m", "kvspec.decoding.vllm_generate", str(settings)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)  # fmt: skip
        self.asked = 0

    def __call__(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 stops: Sequence[int]) -> list[list[int]]:  # fmt: skip
        self.asked += 1
        out = self.tmp / f"answer-{self.asked}.json"
        request = self.tmp / f"request-{self.asked}.json"
        request.write_text(json.dumps({"prompts": [list(p) for p in prompts], "out": str(out),
                                       "max_new_tokens": max_new_tokens,
                                       "stops": list(stops)}))  # fmt: skip
        self.proc.stdin.write(f"{request}\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:  # vLLM may print its own lines too
            if line.startswith(f"{DONE} {out}"):
                return json.loads(out.read_text())["tokens"]
        raise RuntimeError(f"the vLLM process ended (exit {self.proc.wait()}) before answering")

    def __enter__(self) -> VllmGenerator:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for f in self.tmp.iterdir():
            f.unlink()
        self.tmp.rmdir()
