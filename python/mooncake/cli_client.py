"""``mooncake.cli_client:main`` runs the installed ``mooncake_client`` with this process's arguments
(upstream's console script of that name is this exec wrapper; see mooncake.cli)."""

import sys

from mooncake.cli import exec_packaged


def main() -> int:
    """``mooncake_client`` with this process's arguments; 127 with a message if not installed."""
    return exec_packaged("mooncake_client")


if __name__ == "__main__":
    sys.exit(main())
