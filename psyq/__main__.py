"""`python -m psyq` runs the command line."""

import sys

from psyq.cli.main import main

sys.exit(main())
