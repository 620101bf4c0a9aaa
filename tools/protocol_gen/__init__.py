"""The code generator behind ``tools/gen_protocol.py``: ``schema`` reads Kafka's JSON message schemas, ``emit``
writes the Python codec module of one schema."""
