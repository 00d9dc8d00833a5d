"""The Redis backend: BullMQ 5/6's layout, one Lua script per state transition."""

from psyq.backends.redis.backend import RedisBackend, open_redis_backend
from psyq.backends.redis.transfer import QueueScan, get_queue_meta, scan_queues

# QueueScan, get_queue_meta, scan_queues: psyq migrate finds the queues of a keyspace.
__all__ = ["QueueScan", "RedisBackend", "get_queue_meta", "open_redis_backend", "scan_queues"]
