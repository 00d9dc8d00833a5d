"""`python -m bench.run`: today's tables, psyq side by side with its peers (the options are
bench.harness.runner's)."""

from __future__ import annotations

import sys

from bench.harness.runner import main

if __name__ == "__main__":
    sys.exit(main())
