"""Kafka's replication inside a broker: ``manager.py`` keeps the local replicas in line with the cluster's view
(Kafka's ``ReplicaManager``: lead, follow, stop, delete; ISR changes through the controller's store) and
``fetcher.py`` is the follower side (Kafka's ``ReplicaFetcherThread``: Fetch with a replica id, truncation by
OffsetForLeaderEpoch). The leader side (follower log ends, ISR, high watermark) is in ``broker/partition.py``.
"""
