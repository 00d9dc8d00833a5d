"""BullMQ 6's Postgres layout (`postgresql://...?layout=bullmq`); see backend.py."""
