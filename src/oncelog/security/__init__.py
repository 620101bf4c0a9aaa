"""Security decisions and their records, without I/O: principals, the records of ACLs, SCRAM credentials and client
quotas behind one store interface (a file for a single node, etcd for a cluster, memory in tests), and the pure
parts of authentication and authorization built on them.

A layer of its own: it imports only ``protocol`` and ``storage`` (atomic file writes); ``broker`` asks it, and the
cluster keeps its records in etcd as opaque bytes (``cluster`` does not import it).
"""
