"""mooncake.dataproto_catalog: the catalog of which stored fragment holds each row's
fields, and its client, against real structured objects in a real store (and against a
catalog whose answers get lost, to check the retry rules)."""
import uuid
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import _Spawner  # noqa: E402
from mooncake.dataproto_catalog import DataProtoCatalog, DataProtoCatalogTransfer  # noqa: E402
from mooncake.store import MooncakeDistributedStore  # noqa: E402
from mooncake.structured_object_store import (  # noqa: E402
    MooncakeBundleTransfer, export_dataproto_ref)
from store_proc import StoreCluster  # noqa: E402


def handle(mkey, fields, n):
    return {"type": "mooncake_dataproto_ref", "version": 1, "kind": "bundle_stages",
            "batch_size": n, "stage_refs": {"s": {"manifest_key": mkey}},
            "field_index": {f: {"stage": "s", "member": f"batch.{f}", "section": "batch"}
                            for f in fields}}


def test_fields_groups_and_replacement():
    c = DataProtoCatalog()
    c.update("p", ["r1", "r2", "r3"], tags=[{"s": 1}] * 3, handle=handle("m/a", ["x", "y"], 3))
    res = c.update("p", ["r3", "r1"], tags=[{"s": 2}, {"t": 0}], handle=handle("m/b", ["z"], 2))
    assert res["fields"] == ["x", "y", "z"]
    assert c.list("p") == {"p": {"r1": {"s": 1, "t": 0}, "r2": {"s": 1}, "r3": {"s": 2}}}
    plan = c.resolve("p", ["r1", "r3"], ["z", "x", "y"])
    assert plan["fields"] == ["z", "x", "y"]
    assert plan["field_groups"] == [
        {"fields": ["z"], "locations": [("m/b", 1), ("m/b", 0)]},
        {"fields": ["x", "y"], "locations": [("m/a", 0), ("m/a", 2)]}]
    assert set(plan["handles"]) == {"m/a", "m/b"}
    assert c.resolve("p", ["r1", "r3"])["fields"] == ["x", "y", "z"]
    assert c.resolve("p", ["r2", "r1"])["fields"] == ["x", "y"]  # what both rows have
    # replacing every row of an external fragment drops it (only managed ones retire)
    assert c.update("p", ["r1", "r3"], handle=handle("m/c", ["z"], 2))["retired_handles"] == []
    assert set(c.resolve("p", ["r1"])["handles"]) == {"m/a", "m/c"}
    for bad, match in [(lambda: c.resolve("p", ["nope"]), "were not found"),
                       (lambda: c.resolve("p", ["r2"], ["z"]), "not ready"),
                       (lambda: c.resolve("p", "r1"), "sequence"),
                       (lambda: c.update("p", ["r1"], tags=[{}, {}]), "same length"),
                       (lambda: c.update("q", ["r1", "r2"], handle=handle("m/d", ["x"], 1)),
                        "batch_size")]:
        with pytest.raises(ValueError, match=match):
            bad()
    assert "q" not in c.list()
    c.update("e", ["k"], tags=[{}])
    with pytest.raises(ValueError, match="do not contain any fields"):
        c.resolve("e", ["k"])
    c.remove("p", ["r1", "r2", "r3"])
    c.remove("e", ["k"])
    assert c.list() == {}


def test_managed_publications_are_idempotent_and_retire():
    c = DataProtoCatalog()
    assert c.publish("op1", "p", ["a"], handle=handle("m/1", ["v"], 1))["fields"] == ["v"]
    # a retry of op1 (even with other arguments) changes nothing until it is acked
    assert c.publish("op1", "other", ["b"], handle=handle("m/9", ["w"], 1))["fields"] == ["v"]
    assert "other" not in c.list()
    c.ack_publication("op1")
    res = c.publish("op2", "p", ["a"], handle=handle("m/2", ["v"], 1))
    assert [h["stage_refs"]["s"]["manifest_key"] for h in res["retired_handles"]] == ["m/1"]
    assert c.ack_retired(res["retired_handles"])["retired_handles"] == []
    retired = c.drain()["retired_handles"]
    assert [h["stage_refs"]["s"]["manifest_key"] for h in retired] == ["m/2"]
    with pytest.raises(RuntimeError, match="catalog is drained"):
        c.publish("op3", "p", ["a"], handle=handle("m/3", ["v"], 1))
    assert c.ack_retired(retired)["retired_handles"] == []


@pytest.fixture(scope="module")
def transfer():
    sp = _Spawner()
    cluster = StoreCluster(sp)
    s = MooncakeDistributedStore()
    assert s.setup(*cluster.setup_args()) == 0
    t = MooncakeBundleTransfer(s, key_prefix=f"cat-{uuid.uuid4().hex[:8]}")
    try:
        yield t
    finally:
        t.close()
        s.close()
        sp.cleanup()


def batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    return SimpleNamespace(batch={"ids": torch.randint(0, 100, (n, 4), generator=g)},
                           non_tensor_batch={"uid": np.arange(n)}, meta_info={})


def manifest_exists(transfer, h):
    return transfer.store.is_exist(h["stage_refs"]["default"]["manifest_key"]) == 1


def test_client_with_a_real_store_reads_and_cleanup(transfer):
    catalog = DataProtoCatalog()
    client = DataProtoCatalogTransfer(transfer, lambda m, *a, **k: getattr(catalog, m)(*a, **k))
    data = batch(2, 1)
    client.put(data, partition="train", keys=["a", "b"])
    plan = client.resolve("train", ["b", "a"], ["ids", "uid"])
    (group,) = plan["field_groups"]
    assert group["locations"][0][1] == 1 and group["locations"][1][1] == 0
    (h,) = plan["handles"].values()
    got = transfer.get(h, type="dict")
    assert torch.equal(got["ids"], data.batch["ids"]) and list(got["uid"]) == [0, 1]
    # rows removed while a read holds the fragment: cleaned only after the read ends
    client.remove("train", ["a", "b"])
    assert manifest_exists(transfer, h)
    with pytest.raises(RuntimeError, match="active read"):
        client.drain()
    client.release_read(plan["read_token"])
    assert not manifest_exists(transfer, h)


def test_client_retries_lost_answers_without_resurrecting(transfer):
    catalog = DataProtoCatalog()
    lost = {"publish": 0}

    def lossy(method, *a, **k):
        res = getattr(catalog, method)(*a, **k)
        if lost.get(method):
            lost[method] -= 1
            raise RuntimeError(f"{method} answer lost")
        return res

    first = DataProtoCatalogTransfer(transfer, lossy)
    lost["publish"] = 2  # committed, both answers lost
    with pytest.raises(RuntimeError, match="answer lost"):
        first.put(batch(1, 2), partition="p", keys=["k"])
    (old,) = catalog.resolve("p", ["k"])["handles"].values()
    second = DataProtoCatalogTransfer(transfer, lossy)
    second.put(batch(1, 3), partition="p", keys=["k"])  # replaces (and cleans) the first
    assert not manifest_exists(transfer, old)
    first.close()  # the retried publication must not bring the first fragment back
    (now,) = catalog.resolve("p", ["k"])["handles"].values()
    assert now != old and manifest_exists(transfer, now)
    second.remove("p", ["k"])
    assert not manifest_exists(transfer, now)
    second.drain()
    assert export_dataproto_ref  # the handles above are export_dataproto_ref's format
