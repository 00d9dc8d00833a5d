"""The floor: the rules both the core and the stores follow — how job data is encoded
(codec), the clock, the bounds of a number and their check (limits), schedule arithmetic,
BullMQ's inclusive-end ranges (slices), retention, the pacing of reconnects, the counted
store conflicts, the default key prefix, the version. It imports nothing of psyq but
`psyq.errors`; `psyq.backends` and `psyq.core` both build on it
(tests/unit/test_architecture.py holds the table of layers)."""
