"""An emulated mobile link between client and server (the document's 4G and 5G profiles).

The kernel here has no `sch_netem` (`tc qdisc add ... netem` answers "Specified qdisc kind is
unknown"), so the link is shaped in the transport: a message is cut into MTU-sized packets;
each packet reaches the other side after the serialisation of everything before it at the
link's bandwidth, plus a delay drawn from a normal distribution (mean, standard deviation,
never below zero), plus one retransmission timeout for every time it is lost (each attempt
lost with the profile's probability). The message is delivered when its last packet arrives;
`ShapedSocket.sendall` waits that long before handing the bytes to the real socket, which is
exact for the request-reply exchanges of speculative decoding (one message in flight per
direction). Every draw comes from a seeded generator.
"""

from __future__ import annotations

import math
import random
import socket
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LinkProfile:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0  # standard deviation of the per-packet delay
    loss: float = 0.0  # probability that one transmission of a packet is lost
    bandwidth_mbps: float | None = None  # None: unlimited
    mtu: int = 1400
    rto_ms: float = 200.0  # retransmission timeout (Linux TCP's minimum)

    def __post_init__(self) -> None:
        if not 0.0 <= self.loss < 1.0:
            raise ValueError(f"loss must lie in [0, 1), not {self.loss}")
        if self.delay_ms < 0 or self.jitter_ms < 0 or self.mtu < 1:
            raise ValueError("delay, jitter and MTU must be non-negative (MTU positive)")
        if self.bandwidth_mbps is not None and self.bandwidth_mbps <= 0:
            raise ValueError(f"bandwidth must be positive, not {self.bandwidth_mbps}")


# The document: 5G 10 ± 10 ms, 0.1% loss; 4G 20 Mbit/s, 21 ± 19 ms, 0.1% loss.
PROFILES = {
    "none": LinkProfile(),
    "5G": LinkProfile(delay_ms=10.0, jitter_ms=10.0, loss=0.001),
    "4G": LinkProfile(delay_ms=21.0, jitter_ms=19.0, loss=0.001, bandwidth_mbps=20.0),
}


@dataclass
class LinkStats:
    messages: int = 0
    bytes: int = 0
    packets: int = 0
    losses: int = 0
    seconds: float = 0.0  # emulated one-way time, summed
    delays: list[float] = field(default_factory=list)  # per message


def one_way_seconds(
    n_bytes: int, profile: LinkProfile, rng: random.Random
) -> tuple[float, int, int]:
    """(seconds until the last packet of an n-byte message arrives, packets, losses)."""
    packets = max(1, math.ceil(n_bytes / profile.mtu))
    rate = profile.bandwidth_mbps * 1e6 / 8 if profile.bandwidth_mbps else math.inf
    latest, losses = 0.0, 0
    for i in range(packets):
        sent = min(n_bytes, (i + 1) * profile.mtu) / rate  # serialised up to its end
        tries = 0
        while rng.random() < profile.loss:
            tries += 1
        delay = max(0.0, rng.gauss(profile.delay_ms, profile.jitter_ms)) / 1e3
        latest = max(latest, sent + tries * profile.rto_ms / 1e3 + delay)
        losses += tries
    return latest, packets, losses


class ShapedSocket:
    """A connected socket whose outgoing messages cross the emulated link."""

    def __init__(self, sock: socket.socket, profile: LinkProfile, seed: int) -> None:
        self.sock, self.profile = sock, profile
        self.rng = random.Random(seed)
        self.stats = LinkStats()

    def sendall(self, data: bytes) -> None:
        wait, packets, losses = one_way_seconds(len(data), self.profile, self.rng)
        if wait > 0:
            time.sleep(wait)
        self.sock.sendall(data)
        s = self.stats
        s.messages, s.bytes, s.packets = s.messages + 1, s.bytes + len(data), s.packets + packets
        s.losses, s.seconds = s.losses + losses, s.seconds + wait
        s.delays.append(wait)

    def recv(self, n: int) -> bytes:
        return self.sock.recv(n)

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)

    def close(self) -> None:
        self.sock.close()
