"""The BullMQ model: Queue, Worker, Job, options, backoff, events, clock."""
