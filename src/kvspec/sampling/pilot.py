"""Document 004's pilot: which HumanEval problems the target solves at all, so that pass@k is
compared on problems where methods can differ (a problem no sample of any method passes says
nothing about a difference between samplers)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from tqdm import tqdm

from kvspec.data.records import read_jsonl
from kvspec.decoding.generate import stop_ids
from kvspec.decoding.warp import sample_rows
from kvspec.io import Journal, write_json
from kvspec.models.load import load_model, use_threads
from kvspec.provenance import provenance
from kvspec.sampling.stages import code_prompt, code_stops, completion_text, tokenizer_of
from kvspec.seeds import derive

log = logging.getLogger(__name__)


def pilot_stage(model: str, problems: str, out: str, *, settings: Mapping[str, Any],
                prompt_format: str, sandbox: Mapping[str, Any], seed: int, device: str,
                dtype: str, linear: str, threads: int,
                checkpoint: str | None = None) -> None:  # fmt: skip
    """`samples` classical samples of each of the first `problems` HumanEval problems (all when
    null), decoded as one batch per problem (`sample_rows`) on seeds split from `seed` under
    "pilot", a stream no measurement uses; verdicts from the sandboxed runner. Selected: the
    problems passed at least `min_passes` times, in HumanEval order. Each problem is journalled
    in `checkpoint` as it finishes."""
    use_threads(threads)
    target = load_model(model, dtype=dtype, device=device, linear=linear)[0]
    tok = tokenizer_of(model)
    records = list(read_jsonl(problems))[: settings["problems"]]
    stops = [*stop_ids(target, tok), *code_stops(tok, prompt_format)]
    journal = Journal(checkpoint, key="task_id")
    done = journal.done()
    fs = sandbox["filesystem"] == "required"
    for p, problem in enumerate(tqdm(records, desc="pilot", mininterval=10)):
        tid = problem["task_id"]
        if tid not in done:
            done[tid] = _try(target, tok, problem, p, settings, prompt_format, stops, seed, fs)
            journal.append([done[tid]])
    tasks = [done[r["task_id"]] for r in records]
    selected = [t["task_id"] for t in tasks if t["passes"] >= settings["min_passes"]]
    log.info("pilot: %d of %d problems passed at least %d times", len(selected), len(tasks),
             settings["min_passes"])  # fmt: skip
    made = provenance(dict(settings), models={"target": model})
    write_json(out, {"tasks": tasks, "selected": selected, "settings": dict(settings),
                     "prompt_format": prompt_format, "provenance": made})  # fmt: skip
    journal.finish()


def _try(target: Any, tok: Any, problem: Mapping[str, Any], p: int, settings: Mapping[str, Any],
         fmt: str, stops: list[int], seed: int, require_fs: bool) -> dict[str, Any]:  # fmt: skip
    """One problem's `samples` completions, sampled as one batch and judged in the sandbox."""
    from kvspec.eval.humaneval import score

    start, n, tid = time.perf_counter(), settings["samples"], problem["task_id"]
    rows = sample_rows(target, code_prompt(tok, problem, fmt),
                       [derive(seed, "pilot", p, c) for c in range(n)], settings["max_new_tokens"],
                       temperature=settings["temperature"], top_p=settings["top_p"],
                       eos_token_id=stops)  # fmt: skip
    texts = [completion_text(tok, r, fmt) for r in rows]
    judged = score({tid: texts}, [1], {tid: problem}, timeout_s=settings["timeout"], workers=1,
                   require_fs=require_fs)["per_task"][tid]  # fmt: skip
    return {"task_id": tid, "samples": n, "passes": judged["c"], "tokens": sum(map(len, rows)),
            "seconds": time.perf_counter() - start}  # fmt: skip
