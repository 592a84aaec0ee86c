"""A real server process and a client on the loopback: greedy client-server decoding equals
local greedy decoding (through any link), the link is cut or the server killed and the client
finishes alone or fails naming why, and a misbehaving server never yields tokens."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

from kvspec.remote import protocol as p
from kvspec.remote.client import RemoteError, remote_generate
from kvspec.spec.decode import greedy_generate
from kvspec.spec.drafters import DraftModelDrafter
from kvspec.spec.eagle import EagleDrafter, EagleHead
from tests.spec.test_tree import _llama

PROMPT, NEW = [3, 17, 5, 9, 21, 8], 20


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("remote") / "target"
    _llama(0, layers=3).save_pretrained(path)
    return str(path)


def _server(target_dir: str, tmp_path, *extra: str):
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "kvspec.remote.server", "--target", target_dir,
                             "--port-file", str(port_file), "--dtype", "float64", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    return proc, ("127.0.0.1", int(port_file.read_text()))


@pytest.fixture
def server(target_dir, tmp_path):
    proc, address = _server(target_dir, tmp_path)
    yield proc, address
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("profile", ["none", "5G"])
def test_client_server_greedy_equals_local_greedy(server, profile) -> None:
    _, address = server
    target = _llama(0, layers=3)
    drafter = DraftModelDrafter(_llama(5, layers=1))
    out = remote_generate(address, PROMPT, drafter, NEW, 3, profile=profile, seed=1)
    assert out.tokens == greedy_generate(target, PROMPT, NEW) and out.disconnected is None
    assert out.sent[1] == p.HEADER.size + 4 * 3  # the first draft: 3 nodes, 4 bytes each
    assert out.calls == len(out.sent) - 1 and out.verified == NEW
    if profile == "5G":
        assert out.link_seconds > 0.005 * len(out.sent)


def test_self_drafting_gets_the_targets_features(server) -> None:
    _, address = server
    target = _llama(0, layers=3)
    torch.manual_seed(2)
    drafter = EagleDrafter(EagleHead(target), target)
    out = remote_generate(address, PROMPT, drafter, NEW, 3, kind="eagle")
    assert out.tokens == greedy_generate(target, PROMPT, NEW)
    hidden = target.config.hidden_size
    assert out.received[0] > 0 and len(drafter.features) >= len(PROMPT) - 1
    # every verdict: 3 bytes per token + 1 byte per feature value + a scale per row (+ framing)
    assert all(r > 3 + hidden for r in out.received[1:])


def test_a_cut_link_finishes_with_the_drafter_alone(server) -> None:
    _, address = server
    draft_model = _llama(5, layers=1)
    out = remote_generate(address, PROMPT, DraftModelDrafter(draft_model), NEW, 3,
                          disconnect_after=8)  # fmt: skip
    reference = greedy_generate(_llama(0, layers=3), PROMPT, NEW)
    assert "cut after" in out.disconnected and 8 <= out.verified < NEW
    assert out.tokens[: out.verified] == reference[: out.verified]
    rest = greedy_generate(draft_model, PROMPT + out.tokens[: out.verified], NEW - out.verified)
    assert out.tokens[out.verified :] == rest and len(out.tokens) == NEW


def test_a_killed_server_fails_naming_why_or_falls_back(target_dir, tmp_path) -> None:
    proc, address = _server(target_dir, tmp_path)
    drafter = DraftModelDrafter(_llama(5, layers=1))
    proc.kill()
    proc.wait()
    with pytest.raises(RemoteError, match="stopped answering after 0 new tokens"):
        remote_generate(address, PROMPT, drafter, NEW, 3, fallback=False, timeout_s=5)
    out = remote_generate(address, PROMPT, drafter, NEW, 3, timeout_s=5)
    assert out.verified == 0 and len(out.tokens) == NEW and out.disconnected


def _fake_server(reply: bytes | None) -> tuple[socket.socket, tuple[str, int]]:
    """Accepts one client, reads its HELLO, answers `reply` (None: never answers)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = listener.accept()
        with conn:
            p.read_frame(conn)
            if reply is not None:
                conn.sendall(reply)
            time.sleep(3)

    threading.Thread(target=run, daemon=True).start()
    return listener, listener.getsockname()


def test_a_truncated_reply_raises_and_a_silent_server_times_out() -> None:
    drafter = DraftModelDrafter(_llama(5, layers=1))
    listener, address = _fake_server(p.pack(p.VERDICT, 0, p.encode_verdict([1, 2]))[:-4])
    with listener, pytest.raises(p.ProtocolError, match="truncated VERDICT payload"):
        remote_generate(address, PROMPT, drafter, NEW, 3, timeout_s=10)
    listener, address = _fake_server(None)
    start = time.monotonic()
    with listener, pytest.raises(RemoteError, match="TimeoutError"):
        remote_generate(address, PROMPT, drafter, NEW, 3, timeout_s=0.5, fallback=False)
    assert time.monotonic() - start < 5
