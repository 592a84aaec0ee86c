"""The remote stage (document 002, Tables 3, 4, 7): one trained drafter on a client, its target
on a real server process (`python -m kvspec.remote.server`), over TCP on the loopback.

Per HumanEval prompt: greedy tree decoding (EAGLE-2 trees; chains when `tree` is None) under
each link profile (Table 3: tokens/s, τ, calls to the target; the messages' bytes for Table
7), then the link cut after B new tokens for each B of `cuts` (profile "none": the cut changes
the tokens, not the link) with the client finishing alone, and every answer scored through
the sandboxed HumanEval runner (Table 4; B = ∞ is the uncut answer, the lower bound its first
B tokens). A warm-up generation is discarded.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvspec.io import write_json
from kvspec.provenance import provenance

log = logging.getLogger(__name__)


def start_server(target: str, heads: Mapping[str, str], dtype: str, workdir: str,
                 startup_s: float = 300.0, device: str = "cpu",
                 linear: str = "torch") -> tuple[subprocess.Popen, tuple[str, int]]:  # fmt: skip
    """A server process on a free loopback port (one thread; its target on `device`), and its
    address."""
    port_file = Path(workdir) / "port"
    cmd = [sys.executable, "-m", "kvspec.remote.server", "--target", target, "--port-file",
           str(port_file), "--dtype", dtype, "--threads", "1", "--device", device,
           "--linear", linear, *(f"--head={n}={p}" for n, p in heads.items())]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + startup_s
    while not port_file.exists() or not port_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise RuntimeError(f"the server did not start: {err}")
        time.sleep(0.05)
    return proc, ("127.0.0.1", int(port_file.read_text()))


def remote_stage(inputs: Mapping[str, str], out: str, *, model: str, drafter: str,
                 bench: Mapping[str, Any], profiles: Sequence[str], cuts: Sequence[int],
                 chain_k: int, tree: Mapping[str, int] | None, max_new_tokens: int,
                 timeout_s: float, humaneval_timeout_s: float, sandbox: Mapping[str, Any],
                 dtype: str, linear: str, seed: int, threads: int,
                 device: str = "cpu") -> None:  # fmt: skip
    """Every run of one drafter (`inputs`: `model`, `head`, `prompts`) into `out` (JSON)."""
    from kvspec.data.records import read_jsonl
    from kvspec.decoding.generate import stop_ids
    from kvspec.decoding.prompts import bench_prompts
    from kvspec.models.load import load_model, use_threads
    from kvspec.neural.heads import head_stats, load_head

    use_threads(max(1, threads - 1))  # the server takes one thread
    target, tokenizer = load_model(inputs["model"], dtype=dtype, device="cpu", linear=linear)
    head, decl = load_head(inputs["head"], target)
    records = list(read_jsonl(inputs["prompts"]))
    prompts = bench_prompts(records, bench, tokenizer)
    settings = _Settings(target, head, decl, drafter, chain_k, tree, max_new_tokens,
                         stop_ids(target, tokenizer), timeout_s, seed)  # fmt: skip
    heads = {drafter: inputs["head"]} if decl["kind"] == "moa" else {}
    with tempfile.TemporaryDirectory() as workdir:
        proc, address = start_server(
            inputs["model"], heads, dtype, workdir, device=device, linear=linear
        )
        try:
            settings.run(address, prompts[0][1], "none", None)  # warm-up, discarded
            runs = [{"prompt": pid, "profile": prof, "cut": None,
                     **settings.run(address, ids, prof, None)}
                    for prof in profiles for pid, ids in prompts]  # fmt: skip
            runs += [{"prompt": pid, "profile": "none", "cut": b,
                      **settings.run(address, ids, "none", b)}
                     for b in cuts for pid, ids in prompts]  # fmt: skip
        finally:
            proc.kill()
            proc.wait()
    _score(runs, records, tokenizer, cuts, humaneval_timeout_s, sandbox["filesystem"] == "required")
    meta = {"model": model, "drafter": drafter, "declaration": dict(decl), "bench": dict(bench),
            "profiles": list(profiles), "cuts": list(cuts), "chain_k": chain_k,
            "tree": dict(tree or {}), "max_new_tokens": max_new_tokens,
            "dims": settings.dims(), "link": "shaped in the transport (no sch_netem)"}  # fmt: skip
    write_json(out, {"runs": runs, "meta": meta, "head": head_stats(inputs["head"]),
                     "provenance": provenance(meta)})  # fmt: skip


class _Settings:
    """What every generation of the job shares; `run` makes a fresh drafter each time."""

    def __init__(self, target: Any, head: Any, decl: Mapping[str, Any], name: str, k: int,
                 tree: Mapping[str, int] | None, max_new_tokens: int, stops: Sequence[int],
                 timeout_s: float, seed: int) -> None:  # fmt: skip
        self.target, self.head, self.decl, self.name = target, head, decl, name
        self.k, self.tree, self.max_new_tokens, self.stops = k, tree, max_new_tokens, stops
        self.timeout_s, self.seed = timeout_s, seed

    def run(self, address: tuple[str, int], prompt: list[int], profile: str,
            cut: int | None) -> dict[str, Any]:  # fmt: skip
        from kvspec.neural.heads import make_drafter
        from kvspec.remote.client import remote_generate

        kind = self.decl["kind"]
        drafter = make_drafter(kind, self.head, self.target, self.tree)
        out = remote_generate(address, prompt, drafter, self.max_new_tokens, self.k, kind=kind,
                              head=self.name if kind == "moa" else None, profile=profile,
                              seed=self.seed, stops=self.stops, timeout_s=self.timeout_s,
                              disconnect_after=cut)  # fmt: skip
        if cut is None and out.disconnected:
            raise RuntimeError(f"the server stopped answering: {out.disconnected}")
        return {**out.metrics(), "tokens": out.tokens, "messages": out.messages()}

    def dims(self) -> dict[str, int]:
        """Table 7's symbols: E (hidden), E_kv (K or V width of one layer), TLI."""
        tc = self.target.config
        head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads
        return {"hidden": tc.hidden_size, "e_kv": tc.num_key_value_heads * head_dim,
                "tli": int(self.decl.get("tli", 0)) if self.decl["kind"] == "moa" else 0,
                "layers": tc.num_hidden_layers}  # fmt: skip


def _score(runs: list[dict[str, Any]], records: list[dict[str, Any]], tokenizer: Any,
           cuts: Sequence[int], timeout_s: float, require_fs: bool) -> None:  # fmt: skip
    """HumanEval pass (1/0) of every answer, and of the lower bound (the uncut answer's first
    B tokens) per prompt and B."""
    from kvspec.neural.quality import score_answer

    by_id = {str(r.get("task_id") or r["id"]): r for r in records}
    for run in runs:
        answer = tokenizer.decode(run["tokens"], skip_special_tokens=True)
        run["passed"] = score_answer("humaneval", by_id[run["prompt"]], answer, timeout_s,
                                     require_fs)  # fmt: skip
    uncut = {r["prompt"]: r["tokens"] for r in runs if r["cut"] is None}
    for run in [r for r in runs if r["cut"] is not None]:
        prefix = uncut[run["prompt"]][: run["cut"]]
        answer = tokenizer.decode(prefix, skip_special_tokens=True)
        run["lower_bound_passed"] = score_answer("humaneval", by_id[run["prompt"]], answer,
                                                 timeout_s, require_fs)  # fmt: skip
    log.info("%d answers scored", len(runs))
