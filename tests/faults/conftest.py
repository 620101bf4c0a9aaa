"""The cluster the fault tests of this folder share (``cluster_faults.net_cluster``): started by the first test that
asks for it, stopped after the folder's last test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster_faults import net_cluster

from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.netns import Network


@pytest.fixture(scope="package")
def netcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Network, ClusterProcess]]:
    """3 brokers (with skewable clocks, unskewed until a test says) and one etcd, each on a host of its own."""
    with net_cluster(tmp_path_factory.mktemp("netcluster"), clock_control=True) as nc:
        yield nc
