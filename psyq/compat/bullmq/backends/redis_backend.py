"""`bullmq.backends.redis_backend.RedisBackend`: a queue's store; here every store is a
psyq `Backend` (Redis or not), so the name is kept for imports and isinstance checks."""

from psyq.compat.bullmq.backend import Backend

__all__ = ["RedisBackend"]

RedisBackend = Backend
