"""mooncake.structured_object_store against a real master and real store processes:
nested dicts/lists/tuples of tensors and numpy arrays with ragged shapes, written by one
process and read by another, partial reads, raw bundles, the copy modes, key escaping and
the DataProto-style put/get."""
import uuid

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the venv installs the CPU build; see setup.sh

from compat_child import nested_sample, same  # noqa: E402
from mooncake.structured_object_store import (  # noqa: E402
    BundleTransferPolicy, FieldSchema, MooncakeBundleTransfer, StructuredObjectPayload,
    escape_key_component, export_dataproto_ref, import_dataproto_ref, infer_codec,
    tensor_object_buffer, unescape_key_component)
from store_proc import StoreProc  # noqa: E402


@pytest.fixture(scope="module")
def peer(cluster):
    p = StoreProc(cluster.setup_args(), funcs_from="compat_child", timeout=120)
    assert p.setup_rc == 0
    yield p
    p.close()


@pytest.fixture
def transfer(store):
    t = MooncakeBundleTransfer(store, key_prefix=f"t-{uuid.uuid4().hex[:8]}",
                               default_chunk_bytes=256 << 10)
    yield t
    t.close()


def test_nested_roundtrip_across_processes(transfer, peer):
    prefix = transfer.key_prefix
    # ours -> peer
    ref = transfer.put_object(nested_sample(1))
    assert peer.fn("structured_check", ref.manifest_key, 1, prefix)
    # peer -> ours (the peer writes with 64 KiB chunks: many payload objects)
    key = peer.fn("structured_put", 2, prefix, 64 << 10)
    got = transfer.get_object({"manifest_key": key})
    assert same(got, nested_sample(2))
    assert same(transfer.get_object(ref), nested_sample(1))
    # the big member was split into chunks
    big = ref.manifest["payloads"]["/big"]
    assert len(big["chunks"]) == -(-big["nbytes"] // (256 << 10)) > 1


@pytest.mark.parametrize("mode", ["auto", "copy"])
def test_structured_object_members_slices_and_metadata(transfer, mode):
    tokens = np.arange(24, dtype=np.int32).reshape(6, 4)
    payload = StructuredObjectPayload(
        metadata={"step": 7, "layout": "rollout"},
        buffers={"tokens": tokens, "mask": np.ones((6, 4), dtype=np.int8),
                 "prompt_ids": b"sample-ids", "emb": torch.randn(6, 3)})
    ref = transfer.put_structured_object(payload, policy=BundleTransferPolicy(copy_mode=mode))
    full = transfer.materialize(transfer.read_spec(ref))
    assert full.metadata == {"step": 7, "layout": "rollout"}
    assert set(full.objects) == {"tokens", "mask", "prompt_ids", "emb"}
    assert np.array_equal(full.objects["tokens"], tokens)
    assert full.objects["prompt_ids"] == b"sample-ids"
    spec = transfer.read_spec(ref).select_members(["tokens", "emb"]).slice_member(
        "tokens", axis=0, start=2, end=5)
    part = transfer.materialize(spec)
    assert set(part.objects) == {"tokens", "emb"}
    assert np.array_equal(part.objects["tokens"], tokens[2:5])
    assert torch.equal(part.objects["emb"], payload.buffers["emb"])
    dest = np.empty((3, 4), dtype=np.int32)
    into = transfer.materialize_into(spec, {"tokens": dest})
    assert into.objects["tokens"] is dest and np.array_equal(dest, tokens[2:5])
    with pytest.raises(ValueError, match="destination"):
        transfer.materialize_into(spec, {"tokens": np.empty((2, 4), dtype=np.int32)})
    with pytest.raises(KeyError, match="nope"):
        transfer.materialize(transfer.read_spec(ref).select_members(["nope"]))


def test_raw_bundle_zero_copy_and_remove(store, transfer):
    data = np.frombuffer(bytes(range(256)) * 40, dtype=np.uint8).copy()
    ref = transfer.put_bundle(b"meta!", {"a": b"x" * 1000, "arr/1": data},
                              chunk_bytes=4096)
    meta, bufs = transfer.get_bundle(ref)
    assert meta == b"meta!" and bufs == {"a": b"x" * 1000, "arr/1": data.tobytes()}
    zc = transfer.put_structured_object(
        StructuredObjectPayload(buffers={"raw": tensor_object_buffer(
            data.ctypes.data, data.nbytes, owner=data)}),
        policy=BundleTransferPolicy(copy_mode="zero_copy"))
    assert transfer.materialize(transfer.read_spec(zc)).objects["raw"] == data.tobytes()
    with pytest.raises(ValueError, match="zero_copy"):
        transfer.put_structured_object(StructuredObjectPayload(buffers={"x": data}),
                                       policy=BundleTransferPolicy(copy_mode="zero_copy"))
    keys = list(ref.manifest["cleanup_keys"]) + [ref.manifest_key]
    assert all(store.is_exist(k) == 1 for k in keys)
    transfer.remove_bundle(ref)
    assert all(store.is_exist(k) == 0 for k in keys)
    with pytest.raises(KeyError, match="not found"):
        transfer.get_bundle(ref.manifest_key)
    transfer.remove_bundle(zc)


def test_missing_payload_is_an_error(store, transfer):
    ref = transfer.put_object({"x": np.arange(100)})
    for k in ref.manifest["cleanup_keys"]:
        assert store.remove(k, True) == 0
    with pytest.raises(RuntimeError, match="incomplete|returned"):
        transfer.get_object(ref)


def test_codec_inference_and_key_escaping():
    assert infer_codec(np.zeros(3)) == "ndarray"
    assert infer_codec(np.float32(1)) == "ndarray"
    assert infer_codec(torch.zeros(2)) == "tensor"
    assert infer_codec([np.zeros(2), np.zeros(5)]) == "ragged_ndarray"
    assert infer_codec([np.zeros(2), np.zeros((5, 1))]) == "tree"  # ndims differ
    assert infer_codec((torch.zeros(2), torch.zeros(3))) == "ragged_tensor"
    assert infer_codec({"a": 1}) == "tree"
    assert infer_codec(b"x") == infer_codec(memoryview(b"x")) == "bytes"
    assert infer_codec("s") == infer_codec(None) == "json"
    with pytest.raises(TypeError):
        infer_codec(object())
    for s in ["plain", "a/b", "%41", "@0", "~i1", "", "ü space", "..", "a%_"]:
        e = escape_key_component(s)
        assert "/" not in e and "@" not in e and "~" not in e
        assert unescape_key_component(e) == s
    assert len({escape_key_component(s) for s in ["a/b", "a%2Fb", "a_b", ""]}) == 4


def test_unsupported_values_name_their_path(transfer):
    with pytest.raises(TypeError, match="a/@1"):
        transfer.put_object({"a": [1, object()]})
    with pytest.raises(TypeError, match="JSON"):
        transfer.put_structured_object(StructuredObjectPayload(
            metadata={"x": object()}, buffers={"a": b""}))


def test_dataproto_style_put_get_and_handles(transfer):
    batch = {"input_ids": torch.arange(12).reshape(4, 3), "scores": torch.randn(4)}
    non_tensor = {"uid": np.array(["a", "b", "c", "d"]),
                  "rows": np.array([np.arange(n) for n in (1, 2, 3, 4)] + [None],
                                   dtype=object)[:4]}
    data = type("DP", (), {})()
    data.batch, data.non_tensor_batch, data.meta_info = batch, non_tensor, {"epoch": 3}
    ref = transfer.put(data, type="dataproto", stage="rollout")
    assert ref.batch_size == 4
    handle = export_dataproto_ref(ref)
    again = import_dataproto_ref(handle)
    out = transfer.get(again, fields=["input_ids", "rows"], rows=slice(1, 3))
    assert torch.equal(out.batch["input_ids"], batch["input_ids"][1:3])
    assert [list(r) for r in out.non_tensor_batch["rows"]] == [[0, 1], [0, 1, 2]]
    assert out.meta_info == {"epoch": 3}
    flat = transfer.get(handle, type="dict")
    assert set(flat) == {"input_ids", "scores", "uid", "rows"}
    assert list(flat["uid"]) == ["a", "b", "c", "d"]
    d = transfer.put({"t": torch.ones(2, 2), "n": np.zeros(2), "m": np.ones(2)}, type="dict",
                     field_schemas={"m": FieldSchema("ndarray",
                                                     metadata={"section": "batch"})})
    assert d.field_index["m"].section == "batch" and d.field_index["n"].section == \
        "non_tensor_batch"
    transfer.cleanup_dataproto(handle)
    with pytest.raises(KeyError):
        transfer.get(handle)


def test_result_types_aliases_and_dataproto_wrappers(transfer):
    from mooncake.structured_object_store import (
        MooncakeDataProtoRef, RemoteBundleRef, StructuredFieldLocation, StructuredMemberSlice,
        StructuredObjectReadSpec, StructuredObjectResult, export_ref, import_ref,
        is_dataproto_ref_handle)

    ref = transfer.put_object({"a": np.arange(4)})
    assert isinstance(ref, RemoteBundleRef)
    spec = transfer.read_spec(ref).slice_member("a", 0, 1, 3)
    assert isinstance(spec, StructuredObjectReadSpec)
    assert spec.member_slice("a") == StructuredMemberSlice(0, 1, 3)
    res = transfer.materialize(spec)
    assert isinstance(res, StructuredObjectResult) and list(res.objects["a"]) == [1, 2]
    assert transfer.release_result(res) is None
    data = type("DP", (), {})()
    data.batch, data.non_tensor_batch, data.meta_info = {"t": torch.ones(2)}, {}, {"m": 1}
    dref = transfer.put_dataproto(data)
    assert isinstance(dref, MooncakeDataProtoRef)
    assert dref.field_index["t"] == StructuredFieldLocation("default", "batch.t", "batch")
    handle = export_ref(dref)
    assert is_dataproto_ref_handle(handle) and not is_dataproto_ref_handle({"type": "x"})
    assert import_ref(handle).stage_refs["default"].manifest_key == \
        dref.stage_refs["default"].manifest_key
    out = transfer.get_dataproto(handle, data_cls=dict)
    assert torch.equal(out["batch"]["t"], torch.ones(2)) and out["meta_info"] == {"m": 1}
    with pytest.raises(ValueError, match="version"):
        import_ref({**handle, "version": 99})


def _dp(batch=None, non_tensor=None, meta=None):
    data = type("DP", (), {})()
    data.batch, data.non_tensor_batch, data.meta_info = batch or {}, non_tensor or {}, \
        meta or {}
    return data


def _stored(store, ref):
    """Whether every stage manifest of a DataProto ref is in the store."""
    return [store.is_exist(r.manifest_key) == 1 for r in ref.stage_refs.values()]


def test_dataproto_append_fields_view_and_cleanup(store, transfer, peer):
    ids = torch.arange(8).reshape(4, 2)
    ref = transfer.put_dataproto(_dp({"input_ids": ids}, {"uid": np.array(list("abcd"))},
                                     {"step": 1}),
                                 namespace="roll", partition="train", stage="rollout")
    first_key = ref.stage_refs["rollout"].manifest_key
    # a later stage adds fields for the same rows; nothing already stored is rewritten
    logp = torch.randn(4)
    ref2 = transfer.append_dataproto_fields(export_dataproto_ref(ref),
                                            _dp({"old_log_probs": logp}, None,
                                                {"stage": "old_log_prob"}),
                                            stage="old_log_prob")
    assert set(ref.stage_refs) == {"rollout"}  # the old ref is untouched
    assert set(ref2.stage_refs) == {"rollout", "old_log_prob"}
    assert ref2.stage_refs["rollout"].manifest_key == first_key
    out = transfer.get_dataproto(ref2)
    assert torch.equal(out.batch["input_ids"], ids)
    assert torch.equal(out.batch["old_log_probs"], logp)
    assert out.meta_info == {"step": 1, "stage": "old_log_prob"}
    # another process reads the appended handle
    handle = export_dataproto_ref(ref2)
    assert peer.fn("dataproto_fields", transfer.key_prefix, handle) == [
        "input_ids", "old_log_probs", "uid"]
    # the view comes from the stage manifests
    view = transfer.dataproto_manifest_view(handle)
    assert (view["namespace"], view["partition"], view["batch_size"]) == ("roll", "train", 4)
    assert view["stages"]["old_log_prob"]["dataproto"]["stage"] == "old_log_prob"
    assert set(view["batch_fields"]) == {"input_ids", "old_log_probs"}
    assert view["batch_fields"]["old_log_probs"]["stage"] == "old_log_prob"
    assert isinstance(view["batch_fields"]["input_ids"]["spec"], dict)
    assert set(view["non_tensor_fields"]) == {"uid"} and view["meta_info_keys"] == [
        "step", "stage"]
    # refused appends: a field that exists, another batch size, a stage that exists,
    # an overwrite that drops a field of the stage it replaces
    with pytest.raises(ValueError, match="already exist"):
        transfer.append_dataproto_fields(ref2, _dp({"input_ids": ids}), stage="dup")
    with pytest.raises(ValueError, match="batch size"):
        transfer.append_dataproto_fields(ref2, _dp({"v": torch.ones(3)}), stage="v")
    with pytest.raises(ValueError, match="already exists"):
        transfer.append_dataproto_fields(ref2, _dp({"v": torch.ones(4)}), stage="rollout")
    with pytest.raises(ValueError, match="must include existing fields"):
        transfer.append_dataproto_fields(ref2, _dp({"input_ids": ids}), stage="rollout",
                                         overwrite=True)
    # overwrite replaces a whole stage and removes its old objects
    ids2 = ids + 100
    ref3 = transfer.append_dataproto_fields(
        ref2, _dp({"input_ids": ids2}, {"uid": np.array(list("wxyz"))}), stage="rollout",
        overwrite=True)
    assert store.is_exist(first_key) == 0
    assert torch.equal(transfer.get_dataproto(ref3).batch["input_ids"], ids2)
    # a rejected append is undone without touching what the previous handle names
    ref4 = transfer.append_dataproto_fields(ref3, {"critic": torch.zeros(4)}, stage="critic")
    assert _stored(store, ref4) == [True] * 3
    transfer.cleanup_dataproto_append(export_dataproto_ref(ref3), export_dataproto_ref(ref4))
    assert store.is_exist(ref4.stage_refs["critic"].manifest_key) == 0
    assert _stored(store, ref3) == [True, True]
    assert torch.equal(transfer.get_dataproto(ref3).batch["old_log_probs"], logp)
    transfer.cleanup_dataproto(ref3)
    assert _stored(store, ref3) == [False, False]
