"""`python -m envs`: the registered text envs, their knobs and info keys (envs/catalog.py)."""

import os
import sys

from envs.catalog import main

try:
    sys.exit(main())
except BrokenPipeError:  # `python -m envs | head`: the reader left; not an error
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(0)
