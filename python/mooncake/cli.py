"""Entry points that run the programs this package installs: ``mooncake.cli:main`` runs
``mooncake_master`` (upstream's console script of that name is this exec wrapper; ours
installs the C program itself as well, so both spellings work).

Upstream: ``mooncake-wheel/mooncake/cli.py`` (``main`` execs the packaged binary with the
same arguments). ``mooncake.cli_client`` and ``mooncake.cli_bench`` do the same for
``mooncake_client`` and ``transfer_engine_bench``.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

__all__ = ["main", "exec_packaged"]


def _find(program: str) -> str | None:
    """The installed program: first in this interpreter's scripts directory (where the
    package's meson install put it), then on PATH. None when neither has it."""
    here = os.path.join(sysconfig.get_path("scripts"), program)
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    return shutil.which(program)


def exec_packaged(program: str, argv: list[str] | None = None) -> int:
    """Replaces this process with ``program`` run with ``argv`` (default: this process's
    arguments after the script name). Does not return on success; returns 127 after a
    message on stderr naming the program and what to check when it is not installed."""
    args = sys.argv[1:] if argv is None else list(argv)
    path = _find(program)
    if path is None:
        print(f"mooncake: the program {program!r} is not installed next to this Python "
              f"({sysconfig.get_path('scripts')}) nor on PATH: reinstall the mooncake-c "
              f"package (make setup)", file=sys.stderr)
        return 127
    os.execv(path, [program, *args])
    return 127  # not reached


def main() -> int:
    """``mooncake_master`` with this process's arguments (see ``mooncake_master --help``)."""
    return exec_packaged("mooncake_master")


if __name__ == "__main__":
    sys.exit(main())
