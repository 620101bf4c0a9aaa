"""The broker's metrics: counted on the request path, exported to Prometheus only when scraped.

- ``counts.py``: :class:`~.counts.BrokerMetrics`, the broker's own numbers (plain counts, no locks, no
  prometheus_client on the request path);
- ``export.py``: the Prometheus registry, the scrape-time collectors of partitions, the flusher and fetch sessions,
  and the ``/metrics`` HTTP server (imported, with prometheus_client, on the first scrape);
- ``lag.py``: what an operator looks for first: consumer-group lag and the open transactions that hold back the
  last stable offset.
"""
