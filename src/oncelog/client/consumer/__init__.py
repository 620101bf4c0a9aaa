"""Consumer: manual assignment, Fetch per leader, auto.offset.reset via ListOffsets."""

from .consumer import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, AsyncConsumer, Consumer
from .fetcher import BatchFilter, Fetcher, ReadCommittedFilter, make_batch_filter

__all__ = [
           "OFFSET_BEGINNING",
           "OFFSET_END",
           "OFFSET_INVALID",
           "AsyncConsumer",
           "BatchFilter",
           "Consumer",
           "Fetcher",
           "ReadCommittedFilter",
           "make_batch_filter",
]
