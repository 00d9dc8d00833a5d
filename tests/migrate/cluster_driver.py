"""Runs psyq pipeline commands, one after another, in ONE driver process on ONE Spark session
on a cluster master (each command is given `--master MASTER` and finds the session active):
a Spark application costs a driver JVM and executor JVMs to start, so the cluster tests pay
for one.

    python cluster_driver.py MASTER COMMANDS.json RESULTS.json

COMMANDS.json: a list of argv lists for `psyq`. RESULTS.json: per command, its exit code,
what it printed and how long it took.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time

from psyq.cli.main import main as psyq_main
from psyq_migrate.spark import spark_session


def run(master: str, commands: list[list[str]]) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    with spark_session(master, "psyq-cluster-tests"):
        for argv in commands:
            out, err = io.StringIO(), io.StringIO()
            started = time.monotonic()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = psyq_main([*argv, "--master", master])
            seconds = round(time.monotonic() - started, 1)
            results.append(
                {
                    "argv": argv,
                    "code": code,
                    "out": out.getvalue(),
                    "err": err.getvalue(),
                    "seconds": seconds,
                }
            )
    return results


if __name__ == "__main__":
    master_url, commands_file, results_file = sys.argv[1:4]
    with open(commands_file) as given:
        found = run(master_url, json.load(given))
    with open(results_file, "w") as written:
        json.dump(found, written)
