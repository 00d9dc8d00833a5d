"""The key prefix of every store when none is given: BullMQ's, so Node and Python share
queues by default."""

DEFAULT_PREFIX = "bull"
