"""The coordinators inside a broker: the transaction and group coordinators (``oncelog.coordinator``) wired to the
internal topics (``internal_log.py``), their timers, and the marker and verification channels.

- ``groups.py`` / ``transactions.py``: build each coordinator from what it uses and return a handle that starts and
  closes it (its timer included); on a single node they load every internal partition at start-up.
- ``cluster.py``: in a cluster, both coordinators load and unload partitions as this broker gains and loses the
  leadership of ``__transaction_state`` / ``__consumer_offsets`` partitions.
- ``markers.py`` (markers written to partitions led here), ``remote_markers.py`` (WriteTxnMarkers to other
  brokers), ``txn_verifier.py`` (KIP-890 checks with, and transactions V2 adds to, a coordinator on another broker),
  ``txn_order.py`` (produce requests waiting for a coordinator append in arrival order).
"""
