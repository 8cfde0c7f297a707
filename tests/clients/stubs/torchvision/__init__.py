import types, sys
class _Meta(type):
    def __getattr__(cls, n):
        if n.startswith("__"): raise AttributeError(n)
        return cls
class _Any(metaclass=_Meta):
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return _Any()
class _Mod(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"): raise AttributeError(n)
        return _Any
for _n in ("transforms", "transforms.functional", "transforms.v2", "transforms.v2.functional", "io", "ops"):
    m = _Mod("torchvision." + _n); sys.modules["torchvision." + _n] = m
transforms = sys.modules["torchvision.transforms"]
__version__ = "0.28.0"
