"""The server of client-server speculative decoding: it holds the target, verifies the client's
draft (a chain or an EAGLE-2 tree) greedily and answers with the accepted path, the target's
next token and the drafter's payload for the newly verified positions (`payload`).

`python -m kvspec.remote.server --target DIR --port-file F [--head NAME=PT ...]` listens on
127.0.0.1 (a free port, written to F when ready) and serves sessions one after another;
replies cross the emulated link the client names in its HELLO (default `--profile`). MoA
sessions name a head given with `--head`: the server runs its LSA (the client holds the rest).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from kvspec.remote import protocol as p
from kvspec.remote.link import PROFILES, ShapedSocket
from kvspec.remote.payload import KINDS, server_blocks
from kvspec.seeds import derive

log = logging.getLogger(__name__)


class Session:
    """One generation: the target's cache holds the committed sequence but its last token."""

    def __init__(self, target: torch.nn.Module, prompt: list[int], settings: Mapping[str, Any],
                 heads: Mapping[str, torch.nn.Module]) -> None:  # fmt: skip
        from kvspec.decoding.features import FeatureTap
        from kvspec.decoding.loop import prefill

        self.kind = settings.get("drafter", "independent")
        if self.kind not in KINDS:
            raise p.ProtocolError(f"drafter kind must be one of {KINDS}, not {self.kind!r}")
        self.head = heads.get(settings.get("head") or "") if self.kind == "moa" else None
        if self.kind == "moa" and self.head is None:
            raise p.ProtocolError(f"no MoA head {settings.get('head')!r} on this server "
                                  f"(it holds {sorted(heads)})")  # fmt: skip
        self.lossless = bool(settings.get("lossless", False))
        self.target = target
        wants = self.kind == "eagle" or (self.head is not None and self.head.lsa is None)
        self.tap = FeatureTap(target) if wants else None
        self.seq = list(prompt)
        with torch.inference_mode(), self._tapped():
            self.cache = prefill(target, self.seq)
            n = len(self.seq) - 1
            self.first = self._blocks(self.tap.last if self.tap and n else None, 0, n)

    def _tapped(self) -> Any:
        return self.tap if self.tap is not None else contextlib.nullcontext()

    def _blocks(self, features: torch.Tensor | None, start: int, end: int) -> list[Any]:
        return server_blocks(self.kind, self.head, self.cache, features, start, end)

    @torch.inference_mode()
    def verify(self, tokens: list[int], parents: list[int]) -> tuple[list[int], list[Any]]:
        """The accepted path + the target's next token, and the payload of the positions kept
        (the old last token and the path)."""
        start = len(self.seq) - 1
        with self._tapped():
            path, nxt = self._verify(tokens, parents)
        accepted = [*(tokens[i] for i in path), nxt]
        self.seq += accepted
        rows = [0, *(1 + i for i in path)]
        features = self.tap.last[rows] if self.tap is not None else None
        return accepted, self._blocks(features, start, start + len(accepted))

    def _verify(self, tokens: list[int], parents: list[int]) -> tuple[list[int], int]:
        """Chains as the local loop verifies them (one causal forward), trees with a tree
        mask; the cache keeps the prefix, the root and the accepted path."""
        from kvspec.decoding.cache import crop_to, keep_positions
        from kvspec.decoding.loop import forward_tokens
        from kvspec.decoding.tree import ROOT, DraftTree, tree_logits, verify_tree_greedy
        from kvspec.decoding.verify import verify_greedy

        if parents == p.chain_parents(len(tokens)):
            logits = forward_tokens(self.target, self.cache, [self.seq[-1], *tokens])  # (T, V)
            n_acc, nxt = verify_greedy(logits, tokens)
            crop_to(self.cache, len(self.seq) + n_acc)
            return list(range(n_acc)), nxt
        tree = DraftTree(tokens, [ROOT if q == p.ROOT else q for q in parents],
                         [0.0] * len(tokens))  # fmt: skip
        past = self.cache.get_seq_length()
        path, nxt = verify_tree_greedy(tree_logits(self.target, self.cache, self.seq[-1], tree),
                                       tree)  # fmt: skip
        if len(path) < len(tokens):
            keep_positions(self.cache, [*range(past + 1), *(past + 1 + i for i in path)])
        return path, nxt


def handle(conn: socket.socket, target: torch.nn.Module, profile: str, seed: int,
           timeout_s: float,
           heads: Mapping[str, torch.nn.Module] | None = None) -> None:  # fmt: skip
    """Serve one client until BYE or until the connection ends."""
    conn.settimeout(timeout_s)
    frame = p.read_frame(conn)
    if frame.kind != p.HELLO:
        raise p.ProtocolError(f"expected HELLO, got {p.KINDS[frame.kind]}")
    settings, prompt = p.decode_hello(frame.payload)
    link = ShapedSocket(conn, PROFILES[settings.get("profile", profile)],
                        derive(int(settings.get("seed", seed)), "server link"))  # fmt: skip
    session = Session(target, prompt, settings, heads or {})
    seq = 0
    link.sendall(p.pack(p.VERDICT, seq, p.encode_verdict([], session.first, compress=True,
                                                         lossless=session.lossless)))  # fmt: skip
    while True:
        try:
            frame = p.read_frame(conn)
        except ConnectionError:
            return
        if frame.kind == p.BYE:
            return
        if frame.kind != p.DRAFT:
            raise p.ProtocolError(f"expected DRAFT or BYE, got {p.KINDS[frame.kind]}")
        accepted, blocks = session.verify(*p.decode_draft(frame.payload))
        seq += 1
        reply = p.encode_verdict(accepted, blocks, lossless=session.lossless)
        link.sendall(p.pack(p.VERDICT, seq, reply))


def serve(target_dir: str, port_file: str, profile: str = "none", seed: int = 0,
          timeout_s: float = 60.0, sessions: int | None = None, dtype: str = "float32",
          heads: Mapping[str, str] | None = None, device: str = "cpu",
          linear: str = "torch") -> None:  # fmt: skip
    from kvspec.io import write_text
    from kvspec.models.load import load_weights
    from kvspec.neural.heads import load_head

    target = load_weights(target_dir, dtype=dtype, device=device, linear=linear)
    loaded = {name: load_head(path, target)[0].to(device) for name, path in (heads or {}).items()}
    with socket.create_server(("127.0.0.1", 0)) as server:
        write_text(port_file, str(server.getsockname()[1]))
        served = 0
        while sessions is None or served < sessions:
            conn, _ = server.accept()
            with conn:
                try:
                    session_seed = derive(seed, "session", served)
                    handle(conn, target, profile, session_seed, timeout_s, loaded)
                except Exception as err:  # noqa: BLE001 - a bad session must not end the server
                    log.warning("session %d ended: %s", served, err)
                    _try_error(conn, str(err))
            served += 1


def _try_error(conn: socket.socket, reason: str) -> None:
    with contextlib.suppress(OSError):  # the client may be gone already
        conn.sendall(p.pack(p.ERROR, 0, reason.encode()))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--profile", default="none", choices=sorted(PROFILES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--sessions", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"])
    ap.add_argument(
        "--device", default="cpu", help="where the target runs (cuda at the paper scale)"
    )
    ap.add_argument("--linear", default="torch", help="decode engine (resources.linear)")
    ap.add_argument(
        "--head",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a trained MoA head (results/moa/<model>/heads/<name>.pt)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO)
    serve(
        args.target,
        args.port_file,
        args.profile,
        args.seed,
        args.timeout,
        args.sessions,
        args.dtype,
        dict(h.split("=", 1) for h in args.head),
        args.device,
        args.linear,
    )
    Path(args.port_file).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
