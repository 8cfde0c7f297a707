"""``transfer_engine_topology_dump``: print the transfer engine's local topology as JSON.

Upstream's tool (``mooncake/transfer_engine_topology_dump.py``, console script
``transfer_engine_topology_dump``) prints ``Local topology [<backend>/<mode>]: `` followed
by the JSON of ``TransferEngine().get_local_topology(device_name)``, and accepts
``--device-name``, ``--backend {auto,te,tent}``, ``--use-custom-topo`` and
``--custom-topo-json PATH``. Ours prints the same prefix and JSON. Our engine has no RDMA
NICs, so the NIC matrix is the engine's (one ``cpu:<numa node>`` entry with empty NIC
lists per NUMA node), and we add what this build does have: a ``transports`` object with
``tcp`` and ``shm`` (the same-host shared-memory path), each ``{"available": true, ...}``,
and ``rdma`` ``{"available": false, "reason": ...}``.

``--json`` prints only the JSON object (no prefix), for scripts. ``--backend tent`` is
not available here (exit 1 with a message on stderr, as upstream when its backend fails);
``--use-custom-topo`` without ``MC_CUSTOM_TOPO_JSON`` is an error (exit 1), and
``--custom-topo-json PATH`` loads that file's NIC matrix in place of the discovered one.
Exit status: 0, or 1 with ``error: ...`` on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Optional


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="transfer_engine_topology_dump",
        description="Dump the transfer engine's local topology (NIC matrix and the "
                    "transports this build has) as JSON.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device-name", default="",
                   help="comma-separated device filter (no RDMA devices on this build)")
    p.add_argument("--backend", choices=("auto", "te", "tent"), default="auto",
                   help="topology backend (only the classic engine, te, exists here)")
    p.add_argument("--use-custom-topo", action="store_true",
                   help="use the matrix in $MC_CUSTOM_TOPO_JSON instead of discovery")
    p.add_argument("--custom-topo-json", default=None,
                   help="path of a custom topology JSON (sets MC_CUSTOM_TOPO_JSON)")
    p.add_argument("--json", action="store_true", help="print only the JSON object")
    return p


def local_topology(device_name: str = "", custom_path: Optional[str] = None) -> dict[str, Any]:
    """The topology report as a dict: ``nics`` (the NIC matrix: {location: [preferred,
    available]}), ``transports`` and ``device_filter``."""
    from mooncake.engine import TransferEngine

    if custom_path:
        with open(custom_path, encoding="utf-8") as fh:
            nics = json.load(fh)
    else:
        nics = json.loads(TransferEngine().get_local_topology(device_name or None))
    return {
        "nics": nics,
        "transports": {
            "tcp": {"available": True, "description": "TCP to any peer (the data port)"},
            "shm": {"available": True,
                    "description": "shared memory to peers on the same host"},
            "rdma": {"available": False,
                     "reason": "this build has no RDMA transport (CPU/TCP only)"},
        },
        "device_filter": [d for d in device_name.split(",") if d],
    }


def main(argv: Optional[list[str]] = None) -> int:
    args = _parser().parse_args(argv)
    backend = args.backend
    if backend == "auto":
        backend = "tent" if os.environ.get("MC_USE_TENT") or os.environ.get("MC_USE_TEV1") \
            else "te"
    if backend == "tent":
        print("error: failed to dump topology: the TENT backend is not available in this "
              "build", file=sys.stderr)
        return 1
    custom = None
    mode = "discover"
    if args.custom_topo_json is not None:
        custom, mode = args.custom_topo_json, f"custom ({args.custom_topo_json})"
    elif args.use_custom_topo:
        custom = os.environ.get("MC_CUSTOM_TOPO_JSON", "")
        if not custom:
            print("error: --use-custom-topo requires MC_CUSTOM_TOPO_JSON", file=sys.stderr)
            return 1
        mode = f"custom ({custom})"
    try:
        topo = local_topology(args.device_name, custom)
    except Exception as exc:  # noqa: BLE001 - reported as upstream does
        print(f"error: failed to dump topology: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(topo)
    if args.json:
        print(text)
    else:
        print(f"Local topology [{backend}/{mode}]: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
