"""psyq's version: what the package reports and what a Redis backend names in the
worker registry (BullMQ's `bullmq-version` field)."""

VERSION = "0.1.0"
