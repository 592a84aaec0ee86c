"""Verdicts computed outside the sandbox: programs that try to forge a pass must fail, the
reply parser accepts literals only, and the reference solutions still pass."""

from __future__ import annotations

from typing import Any

import pytest

from kvspec.eval.humaneval import check_completion, load_problems
from kvspec.eval.proxy import CandidateError, check_program, literal


@pytest.fixture(scope="module")
def problem() -> dict[str, Any]:
    return load_problems()["HumanEval/0"]  # has_close_elements: asserts True and False


# Each completion is wrong and tries to make the harness report a pass anyway.
FORGERS = {
    "frames": """    return False
import sys
f = sys._getframe()
while f is not None:  # the old runner kept its nonce and report fd in a caller's frame
    for v in list(f.f_locals.values()):
        if isinstance(v, (bytes, str)) and len(v) == 32:
            import os
            for fd in range(3, 64):
                try: os.write(fd, b"OK " + (v if isinstance(v, bytes) else v.encode()))
                except OSError: pass
    f = f.f_back
import os
os._exit(0)  # before the tests could fail
""",
    "gc": """    return False
import gc, os
for obj in gc.get_objects():  # anything holding a 32-character token
    for v in (obj.values() if isinstance(obj, dict) else ()):
        if isinstance(v, bytes) and len(v) == 32:
            for fd in range(3, 64):
                try: os.write(fd, b"OK " + v)
                except OSError: pass
os._exit(0)
""",
    "forged replies on every fd": """    return False
import os
msg = repr(("ready", ["has_close_elements"])).encode()
ok = repr(("ok", True)).encode()
for fd in range(0, 64):
    for m in (msg, ok, ok, ok):
        try: os.write(fd, len(m).to_bytes(8, "big") + m)
        except OSError: pass
""",
    "/proc/self/fd": """    return False
import os
for name in os.listdir("/proc/self/fd"):
    try:
        with open("/proc/self/fd/" + name, "wb") as f: f.write(b"OK passed")
    except OSError: pass
os._exit(0)
""",
    "object equal to everything": """    class Yes:
        def __eq__(self, other): return True
        def __bool__(self): return True
    return Yes()
""",
    "patched builtins": """    return False
import builtins
builtins.AssertionError = type("Quiet", (Exception,), {})
builtins.repr = lambda obj: "('ok', True)"
""",
    "reads the parent": """    return False
import os
for path in (f"/proc/{os.getppid()}/mem", f"/proc/{os.getppid()}/environ", "test.py"):
    try: open(path, "rb").read()
    except OSError: pass
""",
}


@pytest.mark.parametrize("name", list(FORGERS))
def test_forged_passes_fail(problem: dict[str, Any], name: str) -> None:
    result = check_completion(problem, FORGERS[name])
    assert result.status == "failed", (name, result)


def test_patched_repr_only_changes_what_its_functions_return(problem) -> None:
    """A server whose repr says ('ok', True) from the first call on answers True to every
    call: the test that expects False fails on that value; the verdict is never the
    program's to give."""
    completion = """    import builtins
    builtins.repr = lambda obj: "('ok', True)"
    return False
"""
    result = check_completion(problem, completion)
    assert result.status == "failed" and result.reason.startswith("AssertionError"), result


def test_the_canonical_solution_passes(problem) -> None:
    result = check_completion(problem, problem["canonical_solution"])
    assert result.passed and "outside the sandbox" in result.reason


def test_replies_are_literals_only() -> None:
    assert literal("(1, -2.5, 'a', b'x', None, True, [1, (2,)], {1: {2}}, set(), -inf)") == (
        1, -2.5, "a", b"x", None, True, [1, (2,)], {1: {2}}, set(), float("-inf")
    )  # fmt: skip
    assert literal("(1+2j)") == 1 + 2j and literal("frozenset({1})") == frozenset({1})
    for hostile in ("__import__('os').system('true')", "(lambda: 1)()", "open('x')", "x.y",
                    "[1 for _ in range(9)]", "-'a'"):  # fmt: skip
        with pytest.raises(CandidateError):
            literal(hostile)


def test_timeouts_and_crashes_in_the_served_program() -> None:
    def calls(name: str, *args: Any):
        return lambda functions: functions[name](*args)

    slow = check_program("def f():\n    while True: pass\n", calls("f"), timeout_s=1.0)
    assert slow.status == "timeout"
    broken = check_program("raise ValueError('no')\n", calls("f"))
    assert broken.status == "failed" and "did not load: ValueError: no" in broken.reason
    raising = check_program("def f(x):\n    return 1 / x\n", calls("f", 0))
    assert raising.status == "failed" and "f raised ZeroDivisionError" in raising.reason
