"""``mooncake.cli_bench:main`` runs the installed ``transfer_engine_bench`` with this process's arguments
(upstream's console script of that name is this exec wrapper; see mooncake.cli)."""

import sys

from mooncake.cli import exec_packaged


def main() -> int:
    """``transfer_engine_bench`` with this process's arguments; 127 with a message if not installed."""
    return exec_packaged("transfer_engine_bench")


if __name__ == "__main__":
    sys.exit(main())
