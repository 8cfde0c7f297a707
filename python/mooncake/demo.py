"""``python -m mooncake.demo``: what ``make demo`` runs.

The main job on the embedded default: ``mooncake_trace_replay --demo``, i.e. a local
cluster (one ``mooncake_master`` with its embedded HTTP metadata server and two store
nodes of 128 MiB each, all on 127.0.0.1) replaying a built-in SYNTHETIC trace of the
FAST'25 shape (1500 requests, 64 KiB blocks), every byte read back verified, then the
final table, what each figure means, and where the JSON and PNG went (``demo-out/``).
Extra arguments go to the replay tool (``--help`` lists them).
"""
import sys


def main(argv=None) -> int:
    """Runs the replay in demo mode; returns its exit status (0 = correct run)."""
    from mooncake.trace_replay.cli import main as replay_main
    args = list(sys.argv[1:] if argv is None else argv)
    return replay_main(["--demo", *args])


if __name__ == "__main__":
    sys.exit(main())
