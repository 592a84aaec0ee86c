"""A real server process and a client on the loopback: greedy client-server decoding equals
local greedy decoding (through any link), chain and tree, for every drafter kind, and with a
lossless payload the client's drafts are exactly local drafting's; the link is cut or the
server killed and the client finishes alone or fails naming why, and a misbehaving server
never yields tokens."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.decoding.tree import tree_generate
from kvspec.neural.eagle import EagleDrafter, EagleHead
from kvspec.neural.heads import build_head, make_drafter
from kvspec.remote import protocol as p
from kvspec.remote.client import RemoteError, remote_generate
from tests.tiny import tree_llama

PROMPT, NEW = [3, 17, 5, 9, 21, 8], 20
SIZES = {"lsa_intermediate": 16, "sa_intermediate": 16, "ca_intermediate": 32}
HEADS = {"moa0": {"kind": "moa", "tli": 0, **SIZES}, "moa1": {"kind": "moa", "tli": 1, **SIZES},
         "eagle": {"kind": "eagle"}, "independent": {"kind": "independent", "layers": 1,
                                                      "intermediate": 32}}  # fmt: skip
TREE = {"depth": 3, "topk": 2, "total": 5}


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("remote") / "target"
    tree_llama(0, layers=3).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def head_files(tmp_path_factory) -> dict[str, str]:
    """Untrained heads of every kind, saved as the moa stage saves them."""
    target, files = tree_llama(0, layers=3), {}
    for i, (name, decl) in enumerate(HEADS.items()):
        torch.manual_seed(10 + i)
        path = tmp_path_factory.mktemp("heads") / f"{name}.pt"
        torch.save({"drafter": decl, "state": build_head(target, decl).state_dict()}, path)
        files[name] = str(path)
    return files


@pytest.fixture(scope="module")
def served(target_dir, head_files, tmp_path_factory):
    """One server for the module, holding the MoA heads."""
    heads = [f"--head={n}={f}" for n, f in head_files.items() if n.startswith("moa")]
    proc, address = _server(target_dir, tmp_path_factory.mktemp("served"), *heads)
    yield address
    proc.kill()
    proc.wait()


def _recording(drafter):
    """Record every draft the drafter proposes (tokens, and parents of tree nodes)."""
    drafts = []
    for name in ("propose", "propose_tree"):
        inner = getattr(drafter, name, None)
        if inner is None:
            continue

        def wrapped(context, budget, _inner=inner):
            draft = _inner(context, budget)
            drafts.append((list(draft.tokens), list(getattr(draft, "parents", []))))
            return draft

        setattr(drafter, name, wrapped)
    return drafts


def _drafter(name: str, head_files, tree: bool, device: str = "cpu"):
    from kvspec.neural.heads import load_head

    target = tree_llama(0, layers=3).to(device)
    head, decl = load_head(head_files[name], target)
    return target, make_drafter(decl["kind"], head, target, TREE if tree else None), decl["kind"]


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
@pytest.mark.parametrize("name", list(HEADS))
def test_remote_drafts_equal_local_drafts_and_tokens_equal_greedy(served, head_files, name,
                                                                   tree) -> None:  # fmt: skip
    target, local, kind = _drafter(name, head_files, tree)
    local_drafts = _recording(local)
    if tree:
        expected, steps = tree_generate(target, PROMPT, local, NEW)
    else:
        expected, steps = speculative_generate(target, PROMPT, local, NEW, 3)
    assert expected == greedy_generate(target, PROMPT, NEW)
    _, remote, _ = _drafter(name, head_files, tree)
    remote_drafts = _recording(remote)
    out = remote_generate(served, PROMPT, remote, NEW, 3, kind=kind, lossless=True,
                          head=name if kind == "moa" else None)  # fmt: skip
    assert out.tokens == expected and out.disconnected is None
    assert remote_drafts == local_drafts and out.calls == len(steps)
    assert out.nodes[1:] == [s.drafted for s in steps]


@pytest.mark.parametrize("name", ["moa0", "moa1", "eagle"])
def test_a_client_on_a_second_device_drafts_what_local_drafting_drafts(
    served, head_files, name, second_device
) -> None:
    """The client's target layers and head on another device than the payload's arrival
    (tests/second_device.py): the received blocks go to the drafter's device, and its drafts
    are local drafting's on the CPU."""
    _remote_equals_local(served, head_files, name, second_device)


def _remote_equals_local(address, head_files, name: str, device: str = "cpu") -> None:
    """A lossless client (its target layers and head on `device`) gets greedy chain decoding's
    tokens and drafts what local drafting on the CPU drafts, with the link up throughout."""
    target, local, kind = _drafter(name, head_files, False)
    local_drafts = _recording(local)
    expected, _ = speculative_generate(target, PROMPT, local, NEW, 3)
    _, remote, _ = _drafter(name, head_files, False, device)
    remote_drafts = _recording(remote)
    out = remote_generate(address, PROMPT, remote, NEW, 3, kind=kind, lossless=True,
                          head=name if kind == "moa" else None)  # fmt: skip
    assert out.disconnected is None and out.calls > 1, name
    assert out.tokens == expected and remote_drafts == local_drafts, name


def test_a_server_on_a_second_device_verifies_what_the_cpu_verifies(
    target_dir, head_files, tmp_path, second_device
) -> None:
    """The paper scale's server holds the target on a GPU (`--device cuda`): with the target and
    the MoA heads on a second torch device (tests/second_device.py), served in this process,
    every kind's lossless client drafts what local drafting on the CPU drafts."""
    from kvspec.remote.server import serve

    names = ["moa0", "moa1", "eagle", "independent"]
    port_file = tmp_path / "port"
    heads = {n: f for n, f in head_files.items() if n.startswith("moa")}
    thread = threading.Thread(target=serve, args=(target_dir, str(port_file)), daemon=True,
                              kwargs={"sessions": len(names), "heads": heads,
                                      "device": second_device})  # fmt: skip
    thread.start()
    deadline = time.monotonic() + 60
    while not port_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    address = ("127.0.0.1", int(port_file.read_text()))
    for name in names:
        _remote_equals_local(address, head_files, name)
    thread.join(timeout=60)
    assert not thread.is_alive()


@pytest.mark.parametrize("name", ["moa1", "eagle", "independent"])
def test_quantised_payloads_keep_greedy_tokens_and_follow_table_7(served, head_files,
                                                                  name) -> None:  # fmt: skip
    target, drafter, kind = _drafter(name, head_files, True)
    out = remote_generate(served, PROMPT, drafter, NEW, 3, kind=kind,
                          head=name if kind == "moa" else None)  # fmt: skip
    assert out.tokens == greedy_generate(target, PROMPT, NEW)
    tc = target.config
    e_kv = tc.num_key_value_heads * tc.hidden_size // tc.num_attention_heads
    table = "ours" if kind == "moa" else kind
    tli = HEADS[name].get("tli", 0)
    for i in range(1, len(out.sent)):
        m, a = out.nodes[i], out.tokens_back[i]
        t7 = p.table7_bytes(table, m=m, a=a, hidden=tc.hidden_size, kv=e_kv, tli=tli)
        assert out.sent[i] == t7["client"] + p.HEADER.size
        assert out.received[i] == t7["server"] + p.verdict_overhead(out.rows[i])
    assert out.rows[0] == ([] if kind == "independent" else [len(PROMPT) - 1] * (1 + tli))


def test_moa_disconnected_client_finishes_with_its_tli_layers(served, head_files) -> None:
    target, drafter, kind = _drafter("moa1", head_files, True)
    out = remote_generate(served, PROMPT, drafter, NEW, 3, kind=kind, head="moa1",
                          disconnect_after=5, lossless=True)  # fmt: skip
    assert out.verified == 5 and len(out.tokens) == NEW and "cut after 5" in out.disconnected
    assert out.tokens[:5] == greedy_generate(target, PROMPT, 5)
    # alone, the drafter continues its own greedy chain from the state the server sent
    _, local, _ = _drafter("moa1", head_files, True)
    _, steps = tree_generate(target, PROMPT, local, 5)
    assert local.propose(PROMPT + out.tokens[:5], NEW - 5).tokens == out.tokens[5:]


def _server(target_dir: str, tmp_path, *extra: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
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
    target = tree_llama(0, layers=3)
    drafter = DraftModelDrafter(tree_llama(5, layers=1))
    out = remote_generate(address, PROMPT, drafter, NEW, 3, profile=profile, seed=1)
    assert out.tokens == greedy_generate(target, PROMPT, NEW) and out.disconnected is None
    assert out.sent[1] == p.HEADER.size + 4 * 3  # the first draft: 3 nodes, 4 bytes each
    assert out.calls == len(out.sent) - 1 and out.verified == NEW
    if profile == "5G":
        assert out.link_seconds > 0.005 * len(out.sent)


def test_self_drafting_gets_the_targets_features(server) -> None:
    _, address = server
    target = tree_llama(0, layers=3)
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
    draft_model = tree_llama(5, layers=1)
    out = remote_generate(address, PROMPT, DraftModelDrafter(draft_model), NEW, 3,
                          disconnect_after=8)  # fmt: skip
    reference = greedy_generate(tree_llama(0, layers=3), PROMPT, NEW)
    assert "cut after 8" in out.disconnected and out.verified == 8
    assert out.tokens[: out.verified] == reference[: out.verified]
    rest = greedy_generate(draft_model, PROMPT + out.tokens[: out.verified], NEW - out.verified)
    assert out.tokens[out.verified :] == rest and len(out.tokens) == NEW


def test_a_killed_server_fails_naming_why_or_falls_back(target_dir, tmp_path) -> None:
    proc, address = _server(target_dir, tmp_path)
    drafter = DraftModelDrafter(tree_llama(5, layers=1))
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
    drafter = DraftModelDrafter(tree_llama(5, layers=1))
    listener, address = _fake_server(p.pack(p.VERDICT, 0, p.encode_verdict([1, 2]))[:-4])
    with listener, pytest.raises(p.ProtocolError, match="truncated VERDICT payload"):
        remote_generate(address, PROMPT, drafter, NEW, 3, timeout_s=10)
    listener, address = _fake_server(None)
    start = time.monotonic()
    with listener, pytest.raises(RemoteError, match="TimeoutError"):
        remote_generate(address, PROMPT, drafter, NEW, 3, timeout_s=0.5, fallback=False)
    assert time.monotonic() - start < 5


def test_a_dropped_draft_times_out_into_the_fallback() -> None:
    draft_model = tree_llama(5, layers=1)
    listener, address = _fake_server(p.pack(p.VERDICT, 0, p.encode_verdict([])))  # then silent
    start = time.monotonic()
    with listener:
        out = remote_generate(address, PROMPT, DraftModelDrafter(draft_model), NEW, 3,
                              timeout_s=0.5)  # fmt: skip
    assert time.monotonic() - start < 5 and "TimeoutError" in out.disconnected
    assert out.verified == 0 and out.tokens == greedy_generate(draft_model, PROMPT, NEW)


def _dying(drafter, proc):
    """The server process dies while the client drafts its third step."""
    inner, calls = drafter.propose, []

    def propose(context, k):
        calls.append(k)
        if len(calls) == 3:
            proc.kill()
            proc.wait()
        return inner(context, k)

    drafter.propose = propose
    return drafter


def test_a_server_restart_mid_generation_falls_back_then_serves_again(target_dir, tmp_path) -> None:
    reference = greedy_generate(tree_llama(0, layers=3), PROMPT, NEW)
    draft_model = tree_llama(5, layers=1)
    proc, address = _server(target_dir, tmp_path / "a")
    out = remote_generate(address, PROMPT, _dying(DraftModelDrafter(draft_model), proc), NEW, 3,
                          timeout_s=5)  # fmt: skip
    assert out.disconnected and 0 < out.verified < NEW and len(out.tokens) == NEW
    assert out.tokens[: out.verified] == reference[: out.verified]
    proc, address = _server(target_dir, tmp_path / "b")
    with pytest.raises(RemoteError, match="stopped answering after [1-9]"):
        remote_generate(address, PROMPT, _dying(DraftModelDrafter(draft_model), proc), NEW, 3,
                        timeout_s=5, fallback=False)  # fmt: skip
    proc, address = _server(target_dir, tmp_path / "c")  # restarted: a new session works
    try:
        again = remote_generate(address, PROMPT, DraftModelDrafter(draft_model), NEW, 3,
                                timeout_s=5)  # fmt: skip
        assert again.tokens == reference and again.disconnected is None
    finally:
        proc.kill()
        proc.wait()
