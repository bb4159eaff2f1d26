"""`python -m envs`: the registered text envs, their knobs and info keys (envs/catalog.py)."""

import sys

from envs.catalog import main

sys.exit(main())
