"""mooncake-c: a C11 implementation of the Mooncake KV-cache store and transfer engine.

Drop-in for upstream's ``mooncake`` package: ``mooncake.store`` and ``mooncake.engine``
are CPython extension modules written in C; the other modules are thin Python.
Like upstream, the package uses ``pkgutil.extend_path`` so that other distributions can
add ``mooncake.*`` submodules.
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

# Upstream's top-level exports (its __init__ imports them from mooncake.buffer_pool; its
# test_import_structure asserts ``mooncake.BufferPool is mooncake.RegisteredBufferPool``).
# Resolved on first use, like __version__, so ``import mooncake`` stays cheap.
_LAZY = {"BufferPool": "mooncake.buffer_pool", "RegisteredBufferPool": "mooncake.buffer_pool"}
__all__ = ["BufferPool", "RegisteredBufferPool"]


def __getattr__(name):
    # ``mooncake.__version__``: the installed distribution's version, which meson-python
    # takes from meson.build's project version (the one place it is written; the C side's
    # MC_VERSION_STRING comes from there too). Looked up on first use so that a plain
    # ``import mooncake`` does not pay for importlib.metadata.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("mooncake-c")
        except PackageNotFoundError:  # run from a source tree that was never installed
            v = "unknown"
        globals()["__version__"] = v
        return v
    if name in _LAZY:
        import importlib

        v = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = v
        return v
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
