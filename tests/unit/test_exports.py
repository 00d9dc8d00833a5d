"""psyq.__all__ is exactly the documented surface (docs/api.md, section "Public names")."""

import re
import subprocess
import sys
from pathlib import Path

import psyq

API_DOC = Path(__file__).parents[2] / "docs" / "api.md"


def documented_names() -> set[str]:
    text = API_DOC.read_text()
    section = text.split("## Public names", 1)[1].split("\n## ", 1)[0]
    listed = section.split("`psyq.sync.Queue`", 1)[0]
    return set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", listed))


def test_all_matches_documented_surface() -> None:
    assert set(psyq.__all__) == documented_names()


def test_every_exported_name_exists() -> None:
    missing = [name for name in psyq.__all__ if not hasattr(psyq, name)]
    assert missing == []


def test_all_has_no_duplicates() -> None:
    assert len(psyq.__all__) == len(set(psyq.__all__))


def test_sync_is_reachable_after_import_psyq_and_loaded_only_then() -> None:
    script = (
        "import sys, psyq\n"
        "assert 'psyq.sync' not in sys.modules, 'loaded by import psyq'\n"
        "queue = psyq.sync.Queue('q', connection='memory://')\n"
        "job = queue.add('x', {'n': 1})\n"
        "assert queue.get_job(job.id).data == {'n': 1}\n"
        "queue.close()\n"
        "assert psyq.sync is sys.modules['psyq.sync']\n"
        "try:\n"
        "    psyq.nope\n"
        "except AttributeError as exc:\n"
        "    assert 'nope' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('psyq.nope')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stderr
