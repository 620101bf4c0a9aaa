"""The broker's part in a cluster (etcd for metadata, ``oncelog.cluster`` for the decisions):

- ``node.py``: connect to etcd, register under a lease, follow the view, take the controller role, leave;
- ``liveness.py``: fast dead-broker detection through connections;
- ``topic_admin.py``: CreateTopics, CreatePartitions, DeleteTopics and Metadata's auto-creation, written to etcd;
- ``reassign.py``: ElectLeaders and AlterPartitionReassignments, run on the controller.
"""
