"""``mooncake.cli_client:main``: upstream's console entry point of ``mooncake_client``
(upstream-mooncake.md §0). Ours installs the C program itself (tools/mooncake_client.c,
on PATH next to the interpreter); this wrapper execs it with the same arguments, for code
that calls the entry point from Python."""
import os
import shutil
import sys


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    path = os.path.join(os.path.dirname(sys.executable), "mooncake_client")
    if not os.path.exists(path):
        path = shutil.which("mooncake_client")
    if not path:
        print("mooncake_client: the program is not installed next to this interpreter nor "
              "on PATH (reinstall the mooncake-c package)", file=sys.stderr)
        return 1
    os.execv(path, [path] + args)


if __name__ == "__main__":
    sys.exit(main())
