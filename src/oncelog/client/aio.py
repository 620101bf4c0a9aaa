"""The asyncio face of the client: ``from oncelog.client.aio import AsyncProducer, AsyncConsumer, AsyncAdmin``.

Same methods and configuration as the synchronous classes in :mod:`oncelog.client`; the I/O methods are
coroutines and run on the caller's event loop (no background thread).
"""

from .admin import AsyncAdmin
from .consumer import AsyncConsumer
from .producer import AsyncProducer

__all__ = ["AsyncAdmin", "AsyncConsumer", "AsyncProducer"]
