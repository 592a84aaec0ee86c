"""Test generated code with a verdict the code cannot forge.

The generated program runs only in the sandbox (`kvspec.eval.sandbox.contained`), where a small
server executes it and then answers calls: each request names one of the program's functions
and its arguments, each reply is the repr of the return value (or of the exception). The
*trusted* test code (e.g. HumanEval's `check`) runs here, in the caller's process, on proxies
that forward calls over two pipes; replies are decoded by a literal-only parser. So the
verdict (did `check` return?) is computed outside the untrusted process: the program can only
choose the values its functions return, not report success, and it never sees the tests.
"""

from __future__ import annotations

import ast
import os
import select
import time
from collections.abc import Callable, Mapping
from typing import Any

from kvspec.eval.sandbox import RunResult, contained, limits

MAX_REPLY = 4 << 20  # bytes of one reply

# Runs inside the sandbox: load program.py, report its functions, then answer calls forever.
_SERVER = r"""
import os, sys
def _serve():
    rq, rp = int(sys.argv[1]), int(sys.argv[2])
    def send(text):
        data = text.encode("utf-8", "replace")
        data = len(data).to_bytes(8, "big") + data
        while data:
            data = data[os.write(rp, data):]
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = os.read(rq, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf
    sys.argv[:] = ["program.py"]
    g = {"__name__": "__main__", "__file__": "program.py", "__builtins__": __builtins__}
    try:
        with open("program.py", encoding="utf-8") as f:
            exec(compile(f.read(), "program.py", "exec"), g)
    except BaseException as e:
        send(repr(("load_error", type(e).__name__ + ": " + str(e)[:300])))
        return
    names = sorted(n for n, v in g.items() if type(v).__name__ == "function")
    send(repr(("ready", names)))
    env = {"__builtins__": {}, "inf": float("inf"), "nan": float("nan"), "set": set,
           "frozenset": frozenset}
    while True:
        head = exact(8)
        if head is None:
            return
        name, args, kwargs = eval(exact(int.from_bytes(head, "big")).decode(), env)
        try:
            text = repr(("ok", g[name](*args, **kwargs)))
        except BaseException as e:
            text = repr(("err", type(e).__name__ + ": " + str(e)[:300]))
        send(text)
_serve()
"""


class CandidateError(Exception):
    """The program's function raised, returned something that is not a literal, or died."""


class Deadline(Exception):
    """The wall-time budget of the whole check ran out."""


def literal(text: str) -> Any:
    """Value of a repr made of literals (numbers incl. inf/nan, str, bytes, bool, None,
    tuples, lists, sets, dicts); anything else is refused, nothing is evaluated."""
    return _value(ast.parse(text, mode="eval").body)


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_value(e) for e in node.elts]
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _number(node.operand, -1 if isinstance(node.op, ast.USub) else 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):  # complex
        right = _number(node.right, 1 if isinstance(node.op, ast.Add) else -1)
        return _number(node.left, 1) + right
    if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
        return float(node.id)
    if _is_empty_set(node):
        return set() if node.func.id == "set" else frozenset()
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "frozenset":
        return frozenset(_value(node.args[0])) if len(node.args) == 1 else _refuse(node)
    return _refuse(node)


def _number(node: ast.AST, sign: int) -> Any:
    value = _value(node)
    if isinstance(value, bool) or not isinstance(value, (int, float, complex)):
        _refuse(node)
    return sign * value


def _is_empty_set(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and getattr(node.func, "id", "") in ("set", "frozenset")
        and not node.args
        and not node.keywords
    )


def _refuse(node: ast.AST) -> Any:
    raise CandidateError(f"not a literal value: {ast.dump(node)[:100]}")


class Remote:
    """The parent's ends of the two pipes to the server, and the check's deadline."""

    def __init__(self, requests: int, replies: int, deadline: float) -> None:
        self.requests, self.replies, self.deadline = requests, replies, deadline

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                raise Deadline
            chunk = os.read(self.replies, n - len(buf))
            if not chunk:
                raise CandidateError("the program's process ended before answering")
            buf += chunk
        return buf

    def receive(self) -> tuple[str, Any]:
        size = int.from_bytes(self._read(8), "big")
        if size > MAX_REPLY:
            raise CandidateError(f"a reply of {size} bytes (limit {MAX_REPLY})")
        try:
            message = literal(self._read(size).decode("utf-8"))
        except (SyntaxError, ValueError, RecursionError, MemoryError, UnicodeDecodeError) as e:
            raise CandidateError(f"an unreadable reply ({type(e).__name__})") from None
        if not (isinstance(message, tuple) and len(message) == 2 and isinstance(message[0], str)):
            raise CandidateError("a reply that is not (kind, value)")
        return message

    def _write(self, data: bytes) -> None:
        while data:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([], [self.requests], [], left)[1]:
                raise Deadline
            try:
                data = data[os.write(self.requests, data[:65536]) :]
            except BrokenPipeError:
                raise CandidateError("the program's process ended before answering") from None

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        data = repr((name, args, kwargs)).encode()
        self._write(len(data).to_bytes(8, "big") + data)
        kind, value = self.receive()
        if kind != "ok":
            raise CandidateError(f"{name} raised {value}")
        return value

    def proxy(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, args, kwargs)

        call.__name__ = name
        return call


def check_program(
    source: str,
    run_tests: Callable[[Mapping[str, Callable[..., Any]]], None],
    timeout_s: float = 5.0,
    **limit_kwargs: Any,
) -> RunResult:
    """Run `source` in the sandbox and `run_tests(functions)` here, where `functions` are
    proxies to the program's functions by name. Passed iff `run_tests` returns in time."""
    lim = limits(timeout_s, **limit_kwargs)
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    try:
        with contained(source, _SERVER, (req_r, rep_w), lim) as box:
            os.close(req_r)
            os.close(rep_w)
            req_r = rep_w = -1
            status, reason = _judge(Remote(req_w, rep_r, box.start + timeout_s), run_tests)
            seconds = time.monotonic() - box.start
    finally:
        for fd in (req_r, req_w, rep_r, rep_w):
            if fd >= 0:
                os.close(fd)
    rc = box.proc.returncode
    return RunResult(status, reason, rc, box.stdout, box.stderr, seconds, box.tags, box.uid)


def _judge(
    remote: Remote, run_tests: Callable[[Mapping[str, Callable[..., Any]]], None]
) -> tuple[str, str]:
    try:
        kind, names = remote.receive()
        if kind != "ready":
            return "failed", f"the program did not load: {names}"
        run_tests({n: remote.proxy(n) for n in names})
    except Deadline:
        return "timeout", "the wall-time budget ran out"
    except CandidateError as e:
        return "failed", str(e)
    except AssertionError as e:
        return "failed", "AssertionError" + (f": {e}" if str(e) else "")
    except Exception as e:  # the trusted tests failed on what the program returned
        return "failed", f"{type(e).__name__}: {e}"
    return "passed", "the tests returned (judged outside the sandbox)"
