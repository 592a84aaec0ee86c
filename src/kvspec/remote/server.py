"""The server of client-server speculative decoding: it holds the target, verifies the client's
drafts greedily and answers with the accepted tokens and, for feature drafters, the target's
activations of the positions it kept.

`python -m kvspec.remote.server --target DIR --port-file F` listens on 127.0.0.1 (a free
port, written to F when ready) and serves sessions one after another; replies cross the
emulated link of `--profile`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
from pathlib import Path
from typing import Any

import torch

from kvspec.remote import protocol as p
from kvspec.remote.link import PROFILES, ShapedSocket

log = logging.getLogger(__name__)
DRAFTERS = ("independent", "eagle")  # what the server sends back: tokens, or + features


class Session:
    """One generation: the target's cache holds the committed sequence but its last token."""

    def __init__(self, target: torch.nn.Module, prompt: list[int], drafter: str) -> None:
        from kvspec.spec.decode import _prefill
        from kvspec.spec.eagle import FeatureTap

        if drafter not in DRAFTERS:
            raise p.ProtocolError(f"drafter kind must be one of {DRAFTERS}, not {drafter!r}")
        self.target, self.drafter = target, drafter
        self.tap = FeatureTap(target) if drafter == "eagle" else None
        self.seq = list(prompt)
        with torch.inference_mode(), self._tapped():
            self.cache = _prefill(target, self.seq)
        self.first = self._features(len(self.seq) - 1) if len(self.seq) > 1 else None

    def _tapped(self) -> Any:
        return self.tap if self.tap is not None else contextlib.nullcontext()

    def _features(self, n: int) -> Any:
        """The last forward's features of its first n positions (feature drafters).  # (n, H)"""
        return None if self.tap is None else self.tap.last[:n].float().numpy()

    @torch.inference_mode()
    def verify(self, drafts: list[int]) -> tuple[list[int], Any]:
        """Accepted drafts + the target's next token, and the features of the positions kept."""
        from kvspec.spec.decode import _forward
        from kvspec.spec.drafters import crop_to
        from kvspec.spec.verify import verify_greedy

        with self._tapped():
            logits = _forward(self.target, self.cache, [self.seq[-1], *drafts])
        n_acc, nxt = verify_greedy(logits, drafts)
        crop_to(self.cache, len(self.seq) + n_acc)
        accepted = [*drafts[:n_acc], nxt]
        self.seq += accepted
        return accepted, self._features(n_acc + 1)


def handle(conn: socket.socket, target: torch.nn.Module, profile: str, seed: int,
           timeout_s: float) -> None:  # fmt: skip
    """Serve one client until BYE or until the connection ends."""
    conn.settimeout(timeout_s)
    link = ShapedSocket(conn, PROFILES[profile], seed)
    frame = p.read_frame(conn)
    if frame.kind != p.HELLO:
        raise p.ProtocolError(f"expected HELLO, got {p.KINDS[frame.kind]}")
    settings, prompt = p.decode_hello(frame.payload)
    session = Session(target, prompt, settings.get("drafter", "independent"))
    seq = 0
    link.sendall(p.pack(p.VERDICT, seq, p.encode_verdict([], session.first, compress=True)))
    while True:
        try:
            frame = p.read_frame(conn)
        except ConnectionError:
            return
        if frame.kind == p.BYE:
            return
        if frame.kind != p.DRAFT:
            raise p.ProtocolError(f"expected DRAFT or BYE, got {p.KINDS[frame.kind]}")
        tokens, parents = p.decode_draft(frame.payload)
        if parents != p.chain_parents(len(tokens)):
            raise p.ProtocolError("this server verifies chains only (each node's parent is "
                                  "the node before it)")  # fmt: skip
        accepted, feats = session.verify(tokens)
        seq += 1
        link.sendall(p.pack(p.VERDICT, seq, p.encode_verdict(accepted, feats)))


def serve(target_dir: str, port_file: str, profile: str = "none", seed: int = 0,
          timeout_s: float = 60.0, sessions: int | None = None,
          dtype: str = "float32") -> None:  # fmt: skip
    from transformers import AutoModelForCausalLM

    from kvspec.io import write_text

    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=getattr(torch, dtype)).eval()
    with socket.create_server(("127.0.0.1", 0)) as server:
        write_text(port_file, str(server.getsockname()[1]))
        served = 0
        while sessions is None or served < sessions:
            conn, _ = server.accept()
            with conn:
                try:
                    handle(conn, target, profile, seed + served, timeout_s)
                except (p.ProtocolError, OSError) as err:
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
    )
    Path(args.port_file).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
