"""`psyq dashboard`: a web page, a JSON API and Prometheus `/metrics` for one store.

    psyq dashboard --connection redis://127.0.0.1:6379/0 --port 8765 [--read-only] [--token T]

Everything reads and acts through the public `Queue` and `Job` API, so it serves every
backend. Needs `pip install 'psyq[dashboard]'` (aiohttp). docs/dashboard.md describes it.
"""

from psyq.dashboard.store import Store

__all__ = ["Store"]
