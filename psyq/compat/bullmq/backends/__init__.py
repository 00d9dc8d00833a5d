"""`bullmq.backends`: where code written for the `bullmq` package finds `create_backend`."""

from psyq.compat.bullmq.backend import Backend, create_backend
from psyq.compat.bullmq.backends.redis_backend import RedisBackend

__all__ = ["Backend", "RedisBackend", "create_backend"]
