"""Helpers shared by the test folders, imported as ``from helpers.MODULE import ...``: pytest's default "prepend"
import mode puts ``tests/`` on ``sys.path`` for ``tests/conftest.py`` (``tests/`` has no ``__init__.py``).

- ``rawclient``: a blocking client over the raw protocol (any request, any version, malformed frames)
- ``txn_raw``: its transactional and idempotent steps, and reading a partition's batches and markers back
- ``cli``: the real ``oncelog`` command run as a user runs it
- ``cluster``: ``etcd_or_skip`` and a broker's /metrics, for the tests that start clusters or etcd
- ``topics``: ``make_topic`` / ``make_topics`` with confluent-kafka's admin client
- ``checker``: the Jepsen-style history checker of the exactly-once tests (its own tests: tests/checker)
- ``copiers``: the exactly-once copy's copier processes (tests/eos/copier.py), its input and its check
- ``workload``: the randomized exactly-once workload (transactional and idempotent writers, live readers)
- ``spark_sink``: the Spark sink's read-back and the crash tests' streaming pipeline
- ``doc_blocks``: the runnable blocks of the README and docs/

A helper only one folder uses stays in that folder.
"""
