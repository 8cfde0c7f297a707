"""mooncake-c: a C11 implementation of the Mooncake KV-cache store and transfer engine.

Drop-in for upstream's ``mooncake`` package: ``mooncake.store`` and ``mooncake.engine``
are CPython extension modules written in C; the other modules are thin Python.
Like upstream, the package uses ``pkgutil.extend_path`` so that other distributions can
add ``mooncake.*`` submodules.
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
__version__ = "0.1.0"
