"""The emulated link: its delays, losses and bandwidth behave as configured (measured over
many seeded draws), and a shaped socket waits that long."""

from __future__ import annotations

import math
import random
import socket
import statistics

import pytest

from kvspec.remote.link import PROFILES, LinkProfile, ShapedSocket, one_way_seconds


def _truncated_normal_mean(mu: float, sigma: float) -> float:
    """E[max(0, N(mu, sigma))]."""
    z = mu / sigma
    phi = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + math.erf(z / math.sqrt(2)))
    return mu * cdf + sigma * phi


def test_the_5g_profile_delays_like_its_distribution() -> None:
    rng = random.Random(0)
    draws = [one_way_seconds(100, PROFILES["5G"], rng)[0] * 1e3 for _ in range(4000)]
    expected = _truncated_normal_mean(10.0, 10.0)  # ~10.8 ms (delays never go below zero)
    assert statistics.mean(draws) == pytest.approx(expected, rel=0.05)
    assert min(draws) >= 0.0


def test_losses_cost_a_retransmission_timeout_each() -> None:
    lossy = LinkProfile(delay_ms=1.0, loss=0.2, rto_ms=50.0)
    rng = random.Random(1)
    results = [one_way_seconds(100, lossy, rng) for _ in range(3000)]
    rate = sum(r[2] for r in results) / (sum(r[2] for r in results) + len(results))
    assert rate == pytest.approx(0.2, abs=0.02)  # losses per transmission attempt
    lost = [r[0] for r in results if r[2] == 1]
    assert statistics.mean(lost) == pytest.approx(0.051, abs=1e-9)


def test_bandwidth_serialises_a_large_message() -> None:
    slow = LinkProfile(bandwidth_mbps=8.0)  # 1 MB/s
    assert one_way_seconds(500_000, slow, random.Random(0))[:2] == (pytest.approx(0.5), 358)


def test_a_shaped_socket_waits_and_counts() -> None:
    a, b = socket.socketpair()
    with a, b:
        link = ShapedSocket(a, LinkProfile(delay_ms=20.0), seed=0)
        link.sendall(b"hello")
        assert b.recv(5) == b"hello"
        assert link.stats.messages == 1 and link.stats.seconds == pytest.approx(0.02)


def test_bad_profiles_are_refused() -> None:
    with pytest.raises(ValueError, match="loss must lie"):
        LinkProfile(loss=1.0)
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        LinkProfile(bandwidth_mbps=0)
