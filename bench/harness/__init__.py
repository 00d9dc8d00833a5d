"""The benchmark harness: the runner (runner.py, started by `python -m bench.run`), psyq's
side of each row (workloads.py), the peers and servers they run against (launch.py), the
table (tables.py), and the helpers the studies share with it (processes.py, figures.py,
pgdb.py, stores.py). Each helper is written once here; a study imports it from here."""
