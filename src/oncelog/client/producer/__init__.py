"""Producer: batching per partition, murmur2 key partitioning, sticky partitioning for null keys."""

from .accumulator import ProducerBatch, RecordAccumulator
from .partitioner import Partitioner
from .producer import AsyncProducer, Producer

__all__ = ["AsyncProducer", "Partitioner", "Producer", "ProducerBatch", "RecordAccumulator"]
