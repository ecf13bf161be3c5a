"""`python -m worker_cli` runs the chunkwise-worker command."""

import sys

from worker_cli.worker import main

sys.exit(main())
