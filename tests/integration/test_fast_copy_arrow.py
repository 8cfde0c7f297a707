"""mooncake._fast_copy.export_arrow_u8 and pillow_arrow_view (upstream's newer Arrow
helpers): the capsules' C structs read field by field through ctypes (the Arrow C Data
Interface layout), the release protocol (the buffer stays referenced until the consumer
releases, a moved struct released later), pyarrow as a consumer when it is installed, and
Pillow images viewed without a copy."""
import ctypes
import gc
import sys

import numpy as np
import pytest

from mooncake._fast_copy import export_arrow_u8, pillow_arrow_view


class ArrowSchema(ctypes.Structure):
    pass


ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowSchema))),
    ("dictionary", ctypes.POINTER(ArrowSchema)),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))),
    ("private_data", ctypes.c_void_p)]


class ArrowArray(ctypes.Structure):
    pass


ArrowArray._fields_ = [
    ("length", ctypes.c_int64), ("null_count", ctypes.c_int64), ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowArray))),
    ("dictionary", ctypes.POINTER(ArrowArray)),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))),
    ("private_data", ctypes.c_void_p)]

_get = ctypes.pythonapi.PyCapsule_GetPointer
_get.restype = ctypes.c_void_p
_get.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _structs(caps):
    schema_cap, array_cap = caps
    s = ArrowSchema.from_address(_get(schema_cap, b"arrow_schema"))
    a = ArrowArray.from_address(_get(array_cap, b"arrow_array"))
    return s, a


def test_export_fields_zero_copy_and_release():
    data = bytearray(b"mooncake arrow bytes")
    refs = sys.getrefcount(data)
    caps = export_arrow_u8(data)
    s, a = _structs(caps)
    assert s.format == b"C" and s.n_children == 0 and bool(s.release)
    assert (a.length, a.null_count, a.offset, a.n_buffers, a.n_children) == (len(data), 0, 0,
                                                                             2, 0)
    assert a.buffers[0] is None  # no validity bitmap
    addr = ctypes.addressof((ctypes.c_char * len(data)).from_buffer(data))
    assert a.buffers[1] == addr  # the caller's bytes, not a copy
    assert sys.getrefcount(data) > refs  # held by the export
    # resizing is refused while exported (a buffer view is held)
    with pytest.raises(BufferError):
        data.extend(b"x")
    # a consumer moves the array out, then releases it after the capsules are gone
    moved = ArrowArray()
    ctypes.pointer(moved)[0] = a
    a.release = ctypes.cast(None, type(a.release))
    del s, a, caps
    gc.collect()
    assert sys.getrefcount(data) > refs
    moved.release(ctypes.byref(moved))
    assert not moved.release
    assert sys.getrefcount(data) == refs
    data.extend(b"!")  # no export left


def test_export_unconsumed_capsules_release_the_buffer():
    arr = np.arange(16, dtype=np.uint16)
    refs = sys.getrefcount(arr)
    caps = export_arrow_u8(arr, None)
    assert _structs(caps)[1].length == arr.nbytes  # bytes, whatever the item type
    del caps
    gc.collect()
    assert sys.getrefcount(arr) == refs
    caps = export_arrow_u8(b"")
    assert _structs(caps)[1].length == 0


def test_export_refuses_what_it_cannot_export():
    with pytest.raises(TypeError):
        export_arrow_u8(12)
    with pytest.raises((TypeError, ValueError, BufferError)):
        export_arrow_u8(np.arange(10)[::2])  # not contiguous
    with pytest.raises(TypeError, match="requested_schema"):
        export_arrow_u8(b"x", "uint8")


def test_export_with_pyarrow():
    pa = pytest.importorskip("pyarrow")
    data = bytes(range(200))
    schema_cap, array_cap = export_arrow_u8(data)
    arr = pa.Array._import_from_c_capsule(schema_cap, array_cap)
    assert arr.type == pa.uint8() and arr.to_pylist() == list(data)


def test_pillow_arrow_view():
    Image = pytest.importorskip("PIL.Image")
    im = Image.new("RGBA", (5, 3), (1, 2, 3, 4))
    if not hasattr(im, "__arrow_c_array__"):
        pytest.skip("this Pillow has no Arrow export")
    im.putpixel((0, 0), (9, 8, 7, 6))
    view = pillow_arrow_view(im)
    assert view.dtype == np.uint8 and view.shape == (5 * 3 * 4,)
    assert not view.flags.writeable
    assert list(view[:8]) == [9, 8, 7, 6, 1, 2, 3, 4]
    assert view.tobytes() == im.tobytes()
    # the pixels outlive the image object through the view
    del im
    gc.collect()
    assert list(view[4:8]) == [1, 2, 3, 4]
    gray = Image.new("L", (4, 2), 77)
    assert set(pillow_arrow_view(gray).tobytes()) == {77}


def test_pillow_arrow_view_refuses_other_objects():
    with pytest.raises(TypeError, match="Arrow export"):
        pillow_arrow_view(b"not an image")

    class Bad:
        def __arrow_c_array__(self, requested_schema=None):
            return export_arrow_u8(b"abc")[::-1]  # (array, schema): wrong order
    with pytest.raises(ValueError):
        pillow_arrow_view(Bad())

    class Wide:
        def __arrow_c_array__(self, requested_schema=None):
            return export_arrow_u8(b"abcd")
    assert pillow_arrow_view(Wide()).tobytes() == b"abcd"  # plain uint8 is fine
