"""`python -m mooncake.trace_replay` = the `mooncake_trace_replay` console script."""
import sys

from .cli import main

sys.exit(main())
