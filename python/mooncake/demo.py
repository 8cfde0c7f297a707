"""``python -m mooncake.demo``: what ``make demo`` runs.

Until the trace-replay tool lands (issue "The main job on real input"), this is a
master-less smoke run: it imports both extension modules, checks that the status codes
round-trip, and says plainly that it is a smoke run, not the main job.
"""
import sys


def main() -> int:
    import mooncake.engine as engine
    import mooncake.store as store

    print("mooncake-c smoke run (no master: the trace replay is not built yet)")
    print(f"  mooncake.store  loaded from {store.__file__}")
    print(f"  mooncake.engine loaded from {engine.__file__}")
    codes = list(store.ErrorCode)
    same = all(engine.ErrorCode[c.name] == c for c in codes)
    print(f"  ErrorCode: {len(codes)} upstream status codes, e.g. "
          f"OBJECT_NOT_FOUND={int(store.ErrorCode.OBJECT_NOT_FOUND)}, "
          f"NO_AVAILABLE_HANDLE={int(store.ErrorCode.NO_AVAILABLE_HANDLE)}; "
          f"store and engine agree: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
