"""The Redis backend: BullMQ 5/6's layout, one Lua script per state transition."""

from psyq.backends.redis.backend import RedisBackend, open_redis_backend

__all__ = ["RedisBackend", "open_redis_backend"]
