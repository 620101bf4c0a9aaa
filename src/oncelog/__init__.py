"""oncelog: a Kafka-compatible log broker with exactly-once semantics."""

__version__ = "0.1.0"
__all__ = ["__version__"]
