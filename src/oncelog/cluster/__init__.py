"""oncelog.cluster: several brokers, replicated partitions, metadata and leader election in etcd.

Layering: ``broker -> cluster -> coordinator -> storage -> protocol``. ``model`` holds the metadata as plain
values; ``metadata`` is the only module that talks to etcd; ``controller`` is a pure decision module.
"""
