"""Child of test_rpc_interface.py: a mooncake.engine.RpcInterface server on 127.0.0.1:0.
Prints "listening <host:port>", then one JSON line per message it receives; a data
message b"stop" stops the server (start_server returns, the process exits 0); a data
message b"raise" makes the callback raise."""
import json
import sys

from mooncake.engine import RpcInterface


def main():
    srv = RpcInterface()
    assert srv.initialize_server("127.0.0.1:0", thread_count=2)

    def on_data(r):
        data = r.get_bytes()
        print(json.dumps({"kind": "data", "size": r.data_size,
                          "data": data.hex() if len(data) <= 64 else "",
                          "same_dict": r["data"] == data, "src": r.source_address}),
              flush=True)
        if data == b"raise":
            raise ValueError("callback failure asked for")
        if data == b"stop":
            srv.stop_server()

    def on_tensor(t):
        x = t.rebuild_tensor()
        print(json.dumps({"kind": "tensor", "shape": t.shape, "dtype": t.dtype,
                          "bytes": t.total_bytes, "sum": float(x.double().sum()),
                          "size": t.get_data_size(),
                          "mv": len(t.get_memory_view())}), flush=True)

    srv.set_data_receive_callback(on_data)
    srv.set_tensor_receive_callback(on_tensor)
    assert srv.start_server_async()
    print("listening", srv.get_listen_address(), flush=True)
    srv.start_server()  # blocks until b"stop"
    sys.exit(0)


if __name__ == "__main__":
    main()
