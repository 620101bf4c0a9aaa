"""Helpers of the tests that start clusters or etcd: ``etcd_or_skip`` and a broker's /metrics."""

from __future__ import annotations

import os
import urllib.request

import pytest

from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.etcd_process import EtcdUnavailable, find_etcd


def etcd_or_skip() -> None:
    try:
        find_etcd()
    except EtcdUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(f"{e} (CI must have etcd: .ci/run installs etcd-server)")
        pytest.skip(str(e))


def scrape(cluster: ClusterProcess, node: int) -> dict[str, float]:
    """The unlabelled samples of a broker's /metrics (the shared cluster's brokers export them)."""
    url = f"http://{cluster.brokers[node].settings['metrics.listen']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            out[name] = float(value)
    return out
