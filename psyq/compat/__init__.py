"""Drop-in layers: other job-queue libraries' public APIs over psyq's core.

`psyq.compat.bullmq` runs code written for the `bullmq` package (PyPI, 3.x) with one import
changed; see docs/porting.md.
"""
