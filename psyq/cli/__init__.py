"""The `psyq` command line: `psyq demo`, `psyq worker`."""
