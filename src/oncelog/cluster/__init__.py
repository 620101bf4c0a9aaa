"""oncelog.cluster: several brokers, replicated partitions, metadata and leader election in etcd.

Layering: ``broker -> cluster -> coordinator -> storage -> protocol``. ``model`` holds the metadata as plain
values; ``store`` the contract of the metadata service; ``metadata`` is the only module that talks to etcd (its
private helpers ``_etcd``, ``_etcd_watch``, ``_etcd_view`` and ``_topics`` included); ``changes`` says what changed
between two views. The controller's decisions are pure: ``partition_change`` (one partition's election, ISR and
reassignment rules), ``placement`` (replicas of new partitions), ``controller`` (events, elections, reassignments,
reconciliation of two views); ``controller_driver`` runs them on the broker holding the controller role.
"""
