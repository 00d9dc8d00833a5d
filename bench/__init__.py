"""psyq's benchmarks, run from the repository's root.

- `bench.harness`: the runner of today's tables (`python -m bench.run`) and the helpers
  every benchmark shares (ports and servers, medians, fills, fresh databases);
- `bench.studies`: one-off studies, each `python -m bench.studies.NAME`;
- bench/peers/: each peer's own script (Node, Bun, or Python from its own virtualenv),
  with the standard-library helpers they share (peerlib.py, pg_counters.py);
- bench/log/: dated entries, how each figure was reached.
"""
