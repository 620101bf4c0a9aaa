"""Topics for a test, created with confluent-kafka's admin client (each test names its own: ``topic_name``)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 20


def make_topics(bootstrap: str, *specs: tuple[str, int], config: dict[str, str] | None = None) -> None:
    """Create each ``(name, partitions)`` of ``specs`` with ``config``; fails if any cannot be created."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until its futures are done
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=config or {}) for name, partitions in specs])
    for f in futures.values():
        f.result(TIMEOUT)


def make_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    make_topics(bootstrap, (name, partitions), config=config)
