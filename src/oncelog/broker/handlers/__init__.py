"""One module per Kafka API. Each exposes API_KEY, MIN_VERSION, MAX_VERSION and handle(broker, ctx, request).

:data:`HANDLERS` lists them without importing them: the router answers ApiVersions from it and imports a handler
module (with its generated codecs) on its API's first request, so a broker listens without loading ~40 handlers.
``tests/unit/broker/test_router.py`` pins the table to the modules' own values; a handler module not in the table
still works (the router imports it at start), but that test fails until its row is added.
"""

#: (api key, module under this package, min version, max version) of every API served, by key
HANDLERS: tuple[tuple[int, str, int, int], ...] = (
    (0, "produce", 3, 11),
    (1, "fetch", 4, 17),
    (2, "list_offsets", 1, 9),
    (3, "metadata", 0, 12),
    (8, "offset_commit", 2, 9),
    (9, "offset_fetch", 1, 9),
    (10, "find_coordinator", 0, 6),
    (11, "join_group", 0, 9),
    (12, "heartbeat", 0, 4),
    (13, "leave_group", 0, 5),
    (14, "sync_group", 0, 5),
    (15, "describe_groups", 0, 5),
    (16, "list_groups", 0, 5),
    (17, "sasl_handshake", 0, 1),
    (18, "api_versions", 0, 4),
    (19, "create_topics", 2, 7),
    (20, "delete_topics", 1, 6),
    (21, "delete_records", 0, 2),
    (22, "init_producer_id", 0, 6),
    (23, "offset_for_leader_epoch", 2, 4),
    (24, "add_partitions_to_txn", 0, 5),
    (25, "add_offsets_to_txn", 0, 4),
    (26, "end_txn", 0, 4),
    (27, "write_txn_markers", 0, 1),
    (28, "txn_offset_commit", 0, 4),
    (29, "describe_acls", 0, 3),
    (30, "create_acls", 0, 3),
    (31, "delete_acls", 0, 3),
    (32, "describe_configs", 1, 4),
    (33, "alter_configs", 0, 2),
    (35, "describe_log_dirs", 1, 4),
    (36, "sasl_authenticate", 0, 2),
    (37, "create_partitions", 0, 3),
    (42, "delete_groups", 0, 2),
    (43, "elect_leaders", 0, 2),
    (44, "incremental_alter_configs", 0, 1),
    (45, "alter_partition_reassignments", 0, 0),
    (46, "list_partition_reassignments", 0, 0),
    (47, "offset_delete", 0, 0),
    (48, "describe_client_quotas", 0, 1),
    (49, "alter_client_quotas", 0, 1),
    (50, "describe_user_scram_credentials", 0, 0),
    (51, "alter_user_scram_credentials", 0, 0),
    (60, "describe_cluster", 0, 1),
    (61, "describe_producers", 0, 0),
    (65, "describe_transactions", 0, 0),
    (66, "list_transactions", 0, 1),
)
