"""Run untrusted (model-generated) Python in a separate, contained process.

The parent never executes the program text itself. Each program runs in a fresh interpreter
(`-I -S -B`: no site-packages, no user paths, no PYTHON* variables) started by `subprocess`,
whose pre-exec hook puts the child in a new session, a new network namespace when the kernel
allows it, under CPU / address-space / file-size / open-file / process limits, and — when
the parent is root — under a fresh, otherwise unused uid. That uid is what makes the
containment complete on a root machine: root ignores RLIMIT_NPROC but the new uid does not,
the uid cannot write outside its temp dir or world-writable directories, cannot read the
parent's /proc entries, and every process it ever spawns (even ones that left the session)
can be found and killed by uid afterwards.

The program also runs in its own mount namespace (bubblewrap, `bwrap`, from the Debian
archive: `apt-get install bubblewrap`) whose file system holds only what the interpreter
needs: its executable, its standard library, the shared libraries they load, /dev/null and
/dev/urandom, a private /tmp, and the program's own working directory. The benchmark's tests
(in the installed packages), the repository, `results/`, model weights and site-packages do
not exist there. Without bubblewrap the sandbox refuses to run unless the caller allows a
visible file system (`require_fs=False`, config `sandbox.filesystem: optional`), and every
result records which isolation applied.

A run counts as passed only if the interpreter exits with status 0 *and* a small runner
around the program reports, over an inherited pipe and with a per-run nonce that is in
neither the program's source nor its environment, that the program body ran to its end.
`os._exit(0)` or `sys.exit(0)` before the end therefore fail.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Literal

Status = Literal["passed", "failed", "timeout"]

_CLONE_NEWNET = 0x40000000
_PR_SET_CHILD_SUBREAPER = 36
_UID_BASE, _UID_SPAN = 1_500_000_000, 100_000_000  # far above any real account
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_TAIL_BYTES = 2000
_LIBC = ctypes.CDLL(None, use_errno=True)

# Runs inside the child. Reads the nonce from a pipe, executes program.py as __main__ and
# reports "OK <nonce>" on the report fd only if the module body finished.
_RUNNER = r"""
import os, sys
def _run():
    report_fd, nonce_fd = int(sys.argv[1]), int(sys.argv[2])
    nonce = os.read(nonce_fd, 128)
    os.close(nonce_fd)
    write = os.write
    sys.argv[:] = ["program.py"]
    try:
        with open("program.py", encoding="utf-8") as f:
            code = compile(f.read(), "program.py", "exec")
        exec(code, {"__name__": "__main__", "__file__": "program.py",
                    "__builtins__": __builtins__})
    except BaseException as e:
        try:
            if isinstance(e, SystemExit):
                msg = "SystemExit(%r) before the end of the program" % (e.code,)
            else:
                msg = type(e).__name__ + (": " + str(e) if str(e) else "")
        except BaseException:
            msg = type(e).__name__
        write(report_fd, ("ERR " + msg[:500]).encode("utf-8", "replace"))
        raise
    write(report_fd, b"OK " + nonce)
_run()
"""


@dataclass(frozen=True)
class RunResult:
    """Outcome of one sandboxed program: a verdict with a specific reason, plus evidence."""

    status: Status
    reason: str
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    seconds: float
    isolation: tuple[str, ...] = ()
    uid: int | None = None  # the throwaway uid the program ran under (None: not dropped)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass(frozen=True)
class Isolation:
    """What this machine lets the sandbox apply; detected once per process."""

    netns: bool  # unshare(CLONE_NEWNET) works: no network at all, not even loopback
    drop_uid: bool  # running as root: each program gets its own unused uid
    python: str  # interpreter the sandboxed uid can actually execute
    subreaper: bool  # we adopt orphaned sandbox processes, so none is left as a zombie
    mounts: tuple[str, ...] = ()  # read-only binds of the mount namespace; () = no bwrap


class SandboxUnavailable(RuntimeError):
    """The file system cannot be hidden from the program here, and the caller requires it."""


@dataclass(frozen=True)
class _Limits:
    timeout_s: float
    cpu_s: int
    mem_mb: int
    fsize_mb: int
    nproc: int
    require_fs: bool = True  # refuse to run without a private mount namespace


def _unshare_net() -> None:
    """Move the calling process into a new, empty network namespace (needs CAP_SYS_ADMIN)."""
    if hasattr(os, "unshare"):  # Python >= 3.12
        os.unshare(_CLONE_NEWNET)
    elif _LIBC.unshare(_CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")


def _runs(argv: list[str], **kwargs: object) -> str | None:
    """Stdout of a short probe command, or None when it cannot be started or fails."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, env={}, **kwargs)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _probe_netns() -> bool:
    return _runs([sys.executable, "-I", "-S", "-c", ""], preexec_fn=_unshare_net) is not None


def _probe_python(uid: int) -> str | None:
    """First interpreter the throwaway `uid` can run with a working stdlib, same minor first.

    The project interpreter may live under a directory only root can traverse (e.g. pyenv in
    /root); then a system python3 of the same kind runs the sandboxed programs.
    """
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    names = [os.path.realpath(sys.executable), getattr(sys, "_base_executable", "")]
    names += [
        shutil.which(n, path="/usr/local/bin:/usr/bin:/bin") or "" for n in (minor, "python3")
    ]
    probe = "import sys, math, json, re, hashlib, collections; print(sys.version_info[:2])"
    seen = {
        n: _runs([n, "-I", "-S", "-c", probe], user=uid, group=uid, extra_groups=[])
        for n in dict.fromkeys(names)
        if n
    }
    want = str(tuple(sys.version_info[:2]))
    ranked = [n for n, v in seen.items() if v == want] + [n for n, v in seen.items() if v]
    return ranked[0] if ranked else None


def _become_subreaper() -> bool:
    """Adopt orphaned descendants so killed sandbox processes can be reaped, not left as zombies.

    Matters where PID 1 does not reap (containers, minimal VMs). Only zombies that belong to a
    sandbox uid are ever reaped by this module.
    """
    return _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


@functools.cache
def detect_isolation() -> Isolation:
    """Detect once which isolation mechanisms work here (root, namespaces, interpreter).

    Also makes this process a child subreaper, once, so it can reap sandbox orphans.
    """
    uid = _pick_uid() if os.geteuid() == 0 else None
    python = _probe_python(uid) if uid is not None else None
    iso = Isolation(
        netns=_probe_netns(),
        drop_uid=python is not None,
        python=python or sys.executable,
        subreaper=_become_subreaper(),
    )
    mounts = _interpreter_files(iso.python)
    if mounts and _probe_bwrap(mounts, iso.python, uid if iso.drop_uid else None):
        return dataclasses.replace(iso, mounts=mounts)
    return iso


def _interpreter_files(python: str) -> tuple[str, ...]:
    """Every path the interpreter needs to start and import its standard library: itself,
    the stdlib directories, and the shared libraries of the executable and of lib-dynload."""
    probe = ("import sys, sysconfig; p = sysconfig.get_paths(); "
             "print(sys.executable); print(p['stdlib']); print(p['platstdlib'])")  # fmt: skip
    out = _runs([python, "-I", "-S", "-c", probe])
    if out is None or shutil.which("ldd") is None:
        return ()
    exe, *libs = out.splitlines()
    dynload = os.path.join(libs[-1], "lib-dynload")
    objects = [exe, *(os.path.join(dynload, n) for n in _listdir(dynload) if n.endswith(".so"))]
    shared = {line.split("=>")[-1].split("(")[0].strip() for obj in objects
              for line in (_runs(["ldd", obj]) or "").splitlines() if "/" in line}  # fmt: skip
    files = {os.path.realpath(sys.executable if exe == "" else exe), *libs, *shared}
    files |= {f for f in ("/etc/ld.so.cache",) if os.path.exists(f)}
    return tuple(sorted(f for f in files if f and os.path.exists(f)))


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _bwrap_argv(mounts: tuple[str, ...], workdir: str) -> list[str]:
    """bubblewrap's arguments: new namespaces of every kind, only `mounts` (read-only), the
    two devices, a private /tmp and the read-write working directory."""
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent"]
    for path in mounts:
        argv += ["--ro-bind", path, path]
    for path in mounts:  # packages installed into the interpreter's own prefix stay hidden
        argv += [a for sub in ("site-packages", "dist-packages")
                 if os.path.isdir(os.path.join(path, sub))
                 for a in ("--tmpfs", os.path.join(path, sub))]  # fmt: skip
    for dev in ("/dev/null", "/dev/urandom"):
        argv += ["--dev-bind", dev, dev]
    return [*argv, "--tmpfs", "/tmp", "--bind", workdir, workdir, "--chdir", workdir, "--"]


def _probe_bwrap(mounts: tuple[str, ...], python: str, uid: int | None) -> bool:
    """Does an interpreter start inside bubblewrap's namespaces (as the sandbox uid)?"""
    if shutil.which("bwrap") is None:
        return False
    with tempfile.TemporaryDirectory(prefix="kvspec-bwrap-") as tmp:
        if uid is not None:
            os.chown(tmp, uid, uid)
        argv = [*_bwrap_argv(mounts, tmp), python, "-I", "-S", "-c", "import math, re"]
        ids = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        return _runs(argv, **ids) is not None


def _proc_table() -> Iterator[tuple[int, int, int, int, str]]:
    """(pid, ppid, real uid, session id, state) of every live or zombie process in /proc."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().rsplit(b")", 1)[1].split()
            uid = _real_uid(name)
        except (OSError, IndexError, ValueError):
            continue
        yield int(name), int(stat[1]), uid, int(stat[3]), stat[0].decode()


def _real_uid(pid: str) -> int:
    """Real uid from /proc/<pid>/status (stat() of /proc/<pid> lies for non-dumpable tasks)."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"Uid:"):
                return int(line.split()[1])
    raise ValueError(pid)


def _pick_uid() -> int:
    """A uid in a high range that no running process uses, so the sandbox owns it alone."""
    busy = {uid for _, _, uid, _, _ in _proc_table()}
    while True:
        uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
        if uid not in busy:
            return uid


def _owned_by(uid: int | None, sid: int) -> list[tuple[int, int, str]]:
    """(pid, ppid, state) of sandbox processes: by uid when dropped, else by session."""
    rows = _proc_table()
    return [(p, pp, st) for p, pp, u, s, st in rows if (u == uid if uid is not None else s == sid)]


def _kill_as(uid: int, python: str) -> None:
    """SIGKILL every process of `uid` atomically: kill(-1) issued by a process of that uid."""
    _runs(
        [python, "-I", "-S", "-c", "import os; os.kill(-1, 9)"],
        user=uid,
        group=uid,
        extra_groups=[],
    )


def _kill_listed(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _reap(pids: list[tuple[int, int, str]]) -> None:
    """Collect zombies that were re-parented to us (we are a subreaper)."""
    me = os.getpid()
    for pid, ppid, state in pids:
        if state == "Z" and ppid == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _clear_processes(uid: int | None, sid: int, python: str, subreaper: bool) -> bool:
    """Kill and reap everything the program spawned; True once nothing is left."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [r for r in _owned_by(uid, sid) if subreaper or r[2] != "Z"]
        if not left:
            return True
        if any(state != "Z" for _, _, state in left):
            _kill_as(uid, python) if uid is not None else _kill_listed([p for p, _, _ in left])
        _reap(left)
        time.sleep(0.01)
    return False


def _remove_strays(uid: int) -> None:
    """Delete what the uid left in world-writable directories (the only ones it could write)."""
    for top in _WORLD_WRITABLE:
        with contextlib.suppress(OSError), os.scandir(top) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        _remove(entry.path)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _user_tasks(uid: int) -> int:
    """Tasks (threads included) charged to `uid`: the quantity RLIMIT_NPROC caps."""
    total = 0
    for pid in (pid for pid, _, u, _, _ in _proc_table() if u == uid):
        with contextlib.suppress(OSError):  # the process may be gone by now
            total += len(os.listdir(f"/proc/{pid}/task"))
    return total


def _rlimits(lim: _Limits, uid: int | None) -> list[tuple[int, tuple[int, int]]]:
    """Resource limits for the child; RLIMIT_NPROC is per-uid, so it counts existing tasks
    when the child keeps our uid (non-root fallback)."""
    mb = 1024 * 1024
    nproc = lim.nproc if uid is not None else _user_tasks(os.getuid()) + lim.nproc
    return [
        (resource.RLIMIT_CPU, (lim.cpu_s, lim.cpu_s + 1)),  # SIGXCPU, then SIGKILL
        (resource.RLIMIT_AS, (lim.mem_mb * mb, lim.mem_mb * mb)),
        (resource.RLIMIT_FSIZE, (lim.fsize_mb * mb, lim.fsize_mb * mb)),
        (resource.RLIMIT_NPROC, (nproc, nproc)),
        (resource.RLIMIT_NOFILE, (64, 64)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]


def _preexec(
    limits: list[tuple[int, tuple[int, int]]], uid: int | None, netns: bool
) -> Callable[[], None]:
    """Child-side setup between fork and exec; order matters (namespaces need root)."""

    def setup() -> None:
        os.setsid()  # own session and process group: killpg reaches the whole tree
        if netns:
            _unshare_net()
        for res, value in limits:
            resource.setrlimit(res, value)
        os.umask(0o077)
        if uid is not None:  # last: drops every capability
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)

    return setup


def _clean_env(workdir: str) -> dict[str, str]:
    """Minimal environment: nothing inherited from the parent (no tokens, no keys)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
    }


def _tail(f: IO[bytes]) -> str:
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - _TAIL_BYTES))
    return f.read().decode("utf-8", "replace")


def _signal_verdict(signum: int, lim: _Limits) -> tuple[Status, str]:
    if signum == signal.SIGXCPU:
        return "timeout", f"CPU time limit of {lim.cpu_s}s exceeded (SIGXCPU)"
    if signum == signal.SIGXFSZ:
        return "failed", f"file size limit of {lim.fsize_mb} MB exceeded (SIGXFSZ)"
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = "unknown"
    return "failed", f"killed by signal {signum} ({name})"


def _verdict(
    rc: int, timed_out: bool, report: bytes, nonce: bytes, stderr: str, lim: _Limits
) -> tuple[Status, str]:
    """Status and a specific reason; passed needs exit 0 and the runner's end-of-body nonce."""
    if timed_out:
        return "timeout", f"timeout after {lim.timeout_s}s"
    if rc < 0:
        return _signal_verdict(-rc, lim)
    if rc == 0 and report.endswith(b"OK " + nonce):
        return "passed", "ran to completion"
    if b"ERR " in report:
        return "failed", report.rsplit(b"ERR ", 1)[1].decode("utf-8", "replace")
    if rc == 0:
        return "failed", "exited with status 0 before the end of the program (os._exit?)"
    last = [line for line in stderr.splitlines() if line.strip()]
    return "failed", last[-1].strip() if last else f"exit status {rc}"


def _isolation_tags(iso: Isolation, uid: int | None) -> tuple[str, ...]:
    tags = ["subprocess", "setsid", "rlimits", "tmpdir", "clean-env"]
    tags += ["mountns(bwrap)"] if iso.mounts else ["filesystem-visible"]
    tags += ["netns"] if iso.netns else ["network-not-isolated"]
    tags += [f"uid={uid}"] if uid is not None else ["same-uid"]
    tags += ["subreaper"] if iso.subreaper else []
    return tuple(tags)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for the child; on wall-time timeout kill its whole process group. True if timed out."""
    try:
        proc.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


@contextlib.contextmanager
def _workdir(uid: int | None, source: str) -> Iterator[str]:
    """Fresh temp dir (owned by the sandbox uid) holding program.py; removed afterwards
    together with anything the uid left in world-writable directories."""
    workdir = tempfile.mkdtemp(prefix="kvspec-sandbox-")
    try:
        path = os.path.join(workdir, "program.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        os.chmod(path, 0o444)
        if uid is not None:
            os.chown(workdir, uid, uid)
        yield workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if uid is not None:
            _remove_strays(uid)


class _Channel:
    """Two pipes to the runner: the nonce goes in, the end-of-program report comes out."""

    def __init__(self, nonce: bytes) -> None:
        self.report_r, self.report_w = os.pipe()
        self.nonce_r, nonce_w = os.pipe()
        os.write(nonce_w, nonce)
        os.close(nonce_w)
        self._child_open = True

    def child_fds(self) -> tuple[int, int]:
        return self.report_w, self.nonce_r

    def close_child_ends(self) -> None:
        """Close our copies of the child's ends, once (a second close could hit a reused fd)."""
        if self._child_open:
            self._child_open = False
            os.close(self.report_w)
            os.close(self.nonce_r)

    def read(self) -> bytes:
        """Whatever reached the report pipe; never blocks (a survivor could hold the write end)."""
        os.set_blocking(self.report_r, False)
        chunks = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.report_r, 65536):
                chunks.append(chunk)
        return b"".join(chunks)

    def __enter__(self) -> _Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_child_ends()
        os.close(self.report_r)


def _start(
    iso: Isolation,
    lim: _Limits,
    uid: int | None,
    workdir: str,
    runner: str,
    fds: tuple[int, ...],
    out: IO[bytes],
    err: IO[bytes],
) -> subprocess.Popen[bytes]:
    """The contained interpreter running `runner` with program.py in `workdir`; `fds` are
    inherited and passed to the runner as arguments."""
    argv = [iso.python, "-I", "-S", "-B", "-c", runner, *map(str, fds)]
    return subprocess.Popen(
        [*_bwrap_argv(iso.mounts, workdir), *argv] if iso.mounts else argv,
        stdin=subprocess.DEVNULL,
        stdout=out,  # files, not pipes: output floods hit RLIMIT_FSIZE, not our memory
        stderr=err,
        cwd=workdir,
        env=_clean_env(workdir),
        pass_fds=fds,
        preexec_fn=_preexec(_rlimits(lim, uid), uid, iso.netns),
    )


@dataclass
class Contained:
    """A running contained program; `stdout`/`stderr` tails are filled in when it is gone."""

    proc: subprocess.Popen[bytes]
    start: float
    tags: tuple[str, ...]
    uid: int | None
    stdout: str = ""
    stderr: str = ""


@contextlib.contextmanager
def contained(source: str, runner: str, fds: tuple[int, ...], lim: _Limits) -> Iterator[Contained]:
    """Start `runner` (Python source) in a contained child with `source` as program.py; on
    exit kill and reap everything it spawned, even on KeyboardInterrupt, and remove its files.
    """
    iso = detect_isolation()
    if lim.require_fs and not iso.mounts:
        raise SandboxUnavailable(
            "generated code would see this machine's files (the benchmark's tests among them): "
            "install bubblewrap (apt-get install bubblewrap), or allow it with the config "
            "key sandbox.filesystem: optional"
        )
    uid = _pick_uid() if iso.drop_uid else None
    with (
        _workdir(uid, source) as workdir,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        proc = _start(iso, lim, uid, workdir, runner, fds, out, err)
        box = Contained(proc, time.monotonic(), _isolation_tags(iso, uid), uid)
        try:
            yield box
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if not _clear_processes(uid, proc.pid, iso.python, iso.subreaper):
                raise RuntimeError(f"sandboxed processes survived (uid={uid}, sid={proc.pid})")
            box.stdout, box.stderr = _tail(out), _tail(err)


def limits(
    timeout_s: float = 5.0,
    cpu_s: int = 5,
    mem_mb: int = 512,
    fsize_mb: int = 16,
    nproc: int = 32,
    require_fs: bool = True,
) -> _Limits:
    return _Limits(timeout_s, cpu_s, mem_mb, fsize_mb, nproc, require_fs)


def run_program(
    source: str,
    timeout_s: float = 5.0,
    cpu_s: int = 5,
    mem_mb: int = 512,
    fsize_mb: int = 16,
    nproc: int = 32,
    require_fs: bool = True,
) -> RunResult:
    """Run `source` as __main__ in a contained child process and judge how it ended.

    "passed" here means exit 0 plus the runner's end-of-body nonce: enough to tell a program
    that ran to its end from one that crashed or exited early, but the runner shares the
    program's interpreter, so a hostile program can forge it. Verdicts that must not be
    forgeable (tests of generated code) are computed outside the sandbox: `kvspec.eval.proxy`.

    Safe to call from a few threads at once: each run has its own uid, pipes and temp dir,
    and the pre-exec hook only makes system calls through already-imported modules (no
    imports, no locks), which is what Python's warning about pre-exec hooks and threads is
    about.
    """
    lim = limits(timeout_s, cpu_s, mem_mb, fsize_mb, nproc, require_fs)
    nonce = secrets.token_hex(16).encode()
    with _Channel(nonce) as chan:
        with contained(source, _RUNNER, chan.child_fds(), lim) as box:
            chan.close_child_ends()
            timed_out = _wait(box.proc, timeout_s)
            seconds = time.monotonic() - box.start
        report = chan.read()
    rc = _program_status(box.proc.returncode, box.tags)
    status, reason = _verdict(rc, timed_out, report, nonce, box.stderr, lim)
    return RunResult(status, reason, rc, box.stdout, box.stderr, seconds, box.tags,
                     box.uid)  # fmt: skip


def _program_status(rc: int, tags: tuple[str, ...]) -> int:
    """The program's exit status; bubblewrap reports a program killed by signal N as 128 + N
    (it waits for the program), so that becomes -N as for a direct child."""
    if "mountns(bwrap)" in tags and rc > 128:
        return -(rc - 128)
    return rc
