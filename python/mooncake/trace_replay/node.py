"""`python -m mooncake.trace_replay.node`: one store node of a local replay cluster.

It sets up a MooncakeDistributedStore that contributes --segment-size bytes to the pool
(protocol tcp, 127.0.0.1), writes --ready-file when setup returned 0, and stays alive
until SIGTERM/SIGINT, then closes the store (unmounting its segment) and exits 0.
Exit status 1 (with the setup code on stderr) when setup fails, 2 on bad arguments.
"""
import argparse
import os
import signal
import sys
import threading


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mooncake.trace_replay.node",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--master", required=True, help="master host:port")
    ap.add_argument("--metadata", required=True, help="metadata URL, e.g. "
                    "http://127.0.0.1:8080/metadata")
    ap.add_argument("--segment-size", type=int, required=True,
                    help="bytes this node contributes")
    ap.add_argument("--local-buffer-size", type=int, default=0, help="bytes (default 0)")
    ap.add_argument("--hostname", default="127.0.0.1",
                    help="local_hostname for setup (default 127.0.0.1; a free port is picked)")
    ap.add_argument("--ready-file", help="written once setup succeeded")
    ap.add_argument("--ssd-offload-path", help="a disk tier in this directory "
                    "(setup(enable_ssd_offload=True, ssd_offload_path=...); its size limit "
                    "comes from MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES)")
    args = ap.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    extra = (None, True, args.ssd_offload_path) if args.ssd_offload_path else ()
    rc = store.setup(args.hostname, args.metadata, args.segment_size, args.local_buffer_size,
                     "tcp", "", args.master, *extra)
    if rc != 0:
        print(f"node: setup(master={args.master}, metadata={args.metadata}, segment="
              f"{args.segment_size}) returned {rc}", file=sys.stderr, flush=True)
        return 1
    print(f"node: ready, segment {args.segment_size} bytes, hostname {store.get_hostname()}",
          flush=True)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n")
        os.rename(tmp, args.ready_file)
    while not stop.wait(0.5):
        pass
    store.close()
    print("node: closed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
