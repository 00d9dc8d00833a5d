"""The engine: psyq's own in-process store (`memory://`), the base of the embedded
SQLite backend and of `psyq server`."""

from psyq.backends.engine.engine import Engine, fnv1a
from psyq.backends.engine.heap import Heap4
from psyq.backends.engine.memory import MemoryBackend, open_memory_backend
from psyq.backends.engine.store import QueueStore

__all__ = ["Engine", "Heap4", "MemoryBackend", "QueueStore", "fnv1a", "open_memory_backend"]
