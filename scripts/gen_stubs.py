#!/usr/bin/env python3
"""scripts/gen_stubs.py: writes the type stubs python/mooncake/store.pyi and engine.pyi.

The stubs are generated from the importable extension modules: every signature comes from
the signature line(s) its docstring already carries ("put(key: str|bytes, value: buffer,
config=ReplicateConfig()) -> int: ..."), attribute types from the head of the attribute's
docstring ("int, 1: ..." -> int), enums from their members. The few members whose
docstrings carry no signature (listed in OVERRIDES) and the protocol methods a docstring
cannot show (EXTRA) are the only hand-written parts. A public member that yields no stub
entry, or an annotation naming an unknown type, is an error, so the stubs cannot silently
drift: tests/integration/test_stubs.py regenerates them from the installed modules and
compares with the shipped files.

Usage: python3 scripts/gen_stubs.py [--out DIR] [--check]
  (the `mooncake` package must be importable: run it with the venv's python)
  --out DIR   where to write store.pyi / engine.pyi (default: python/mooncake)
  --check     write nothing; exit 1 when a shipped stub differs from the generated one
"""
import argparse
import ast
import enum
import importlib
import inspect
import pathlib
import sys

MODULES = ("mooncake.store", "mooncake.engine")

# Pseudo-types the docstrings use, as stub annotations.
ALIASES = {
    "buffer": "Buffer",
    "key": "str | bytes",
    "List": "list",
    "Dict": "dict",
    "PyCapsule": "Any",
}
KNOWN_NAMES = {"int", "str", "bytes", "bool", "float", "list", "dict", "tuple", "object",
               "None", "Any", "Buffer", "torch", "type", "memoryview"}

# Members whose docstrings carry no signature line or no usable type ("Class.member").
OVERRIDES = {
    "ReplicateConfig.__init__": ["(self, **kwargs: Any) -> None"],
    "ReplicaDescriptor.is_memory_replica": ["(self) -> bool"],
    "ReplicaDescriptor.is_disk_replica": ["(self) -> bool"],
    "ReplicaDescriptor.is_local_disk_replica": ["(self) -> bool"],
    "ReplicaDescriptor.get_memory_descriptor": ["(self) -> MemoryDescriptor"],
    "ReplicaDescriptor.get_disk_descriptor": ["(self) -> DiskDescriptor"],
    "Descriptor.size": "int",
    "Descriptor.buffer_address": "int",
    "Descriptor.transport_endpoint": "str",
    "DiskDescriptor.object_size": "int",
    # the same class as RpcInterface under upstream's other name
    "CoroRPCInterface.__init__": ["(self) -> None"],
}
# Protocol methods (slots) a docstring cannot show.
EXTRA = {
    "BufferHandle": ["def __buffer__(self, flags: int, /) -> memoryview: ...",
                     "def __len__(self) -> int: ..."],
    "TransferNotify": ["def __eq__(self, other: object) -> bool: ...",
                       "def __ne__(self, other: object) -> bool: ..."],
}


class StubError(Exception):
    pass


def _split_top(text, sep=","):
    """text split at `sep` outside brackets and quotes."""
    out, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur))
    return [p.strip() for p in out]


def _strip_parens(text):
    """text without parenthesised remarks: 'list[int] (all -600 ...)' -> 'list[int]'."""
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return " ".join("".join(out).split())


class Namer:
    """Maps docstring type text to a stub annotation and checks every name in it."""

    def __init__(self, classes):
        self.classes = set(classes)
        self.used = set()

    def ann(self, text, where):
        text = text.strip()
        if text.startswith("(") and text.endswith(")"):  # "(metadata: bytes, ..., owner)"
            parts = []
            for p in _split_top(text[1:-1]):
                parts.append(self.ann(p.split(":", 1)[1], where) if ":" in p else "Any")
            return "tuple[%s]" % ", ".join(parts)
        text = _strip_parens(text)
        if text.isdigit():  # "-> 304": a constant int
            return "int"
        text = " | ".join(p.strip() for p in text.replace(" or ", "|").split("|"))
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as e:
            raise StubError("%s: cannot read the type %r" % (where, text)) from e

        class Rename(ast.NodeTransformer):
            def visit_Name(node_self, node):
                if node.id in ALIASES:
                    return ast.parse(ALIASES[node.id], mode="eval").body
                return node

        tree = ast.fix_missing_locations(Rename().visit(tree))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                if node.id not in KNOWN_NAMES and node.id not in self.classes:
                    raise StubError("%s: unknown type name %r in %r (add it to ALIASES)"
                                    % (where, node.id, text))
                self.used.add(node.id)
            elif isinstance(node, ast.Constant) and node.value is not None:
                raise StubError("%s: a literal %r is not a type" % (where, node.value))
        return ast.unparse(tree)


def _signatures(name, doc):
    """The '(params) -> ret' texts of `name` in doc: the doc starts with 'name(' and may
    hold several signatures ('setup(...) -> int\\nsetup(config: dict) -> int', 'A() or
    A(x: str)')."""
    sigs, rest = [], doc or ""
    while rest.startswith(name + "("):
        i, depth = len(name), 0
        for j in range(i, len(rest)):
            depth += rest[j] == "("
            depth -= rest[j] == ")"
            if depth == 0:
                break
        else:
            raise StubError("%s: unbalanced signature line" % name)
        params, rest = rest[i + 1:j], rest[j + 1:]
        ret = None
        if rest.startswith(" -> "):
            rest = rest[4:]
            k, depth = 0, 0
            while k < len(rest):
                ch = rest[k]
                if ch in "([":
                    depth += 1
                elif ch in ")]":
                    depth -= 1
                elif depth == 0 and ch == "\n":
                    break
                elif depth == 0 and ch in ":." and (k + 1 == len(rest) or rest[k + 1] in " \n"):
                    break
                k += 1
            ret, rest = rest[:k], rest[k:]
        sigs.append((params, ret))
        for sep in ("\n", " or "):
            if rest.startswith(sep + name + "("):
                rest = rest[len(sep):]
                break
    return sigs


def _default(text):
    text = text.strip()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return "..."
    if isinstance(value, (int, float, str, bool, type(None))):
        return repr(value)
    return "..."


def _render_sig(namer, fname, params, ret, where, self_arg=True):
    out = ["self"] if self_arg else []
    for p in _split_top(params):
        if p == "...":
            out.append("*args: Any")
            continue
        pname, ann, default = p, None, None
        if "=" in pname:
            pname, default = pname.split("=", 1)
        if ":" in pname:
            pname, ann = pname.split(":", 1)
        pname = pname.strip()
        a = namer.ann(ann, where) if ann else None
        d = _default(default) if default is not None else None
        if d == "None" and a and "None" not in a.split(" | "):
            a += " | None"
        text = pname + (": " + a if a else "")
        if d is not None:
            text += (" = " if a else "=") + d
        out.append(text)
    r = " -> " + namer.ann(ret, where) if ret else ""
    return "def %s(%s)%s: ..." % (fname, ", ".join(out), r)


def _method_lines(namer, cls_name, name, obj, indent):
    key = "%s.%s" % (cls_name, name) if cls_name else name
    doc = obj if isinstance(obj, str) or obj is None else obj.__doc__
    where = "%s: %s" % (key, (doc or "").split("\n")[0][:60])
    if key in OVERRIDES:
        sigs = OVERRIDES[key]
        texts = []
        for s in sigs:
            params, ret = s[1:s.index(")")], s.split(" -> ", 1)[1]
            texts.append(_render_sig(namer, name, params, ret, where, self_arg=False))
    else:
        doc_name = cls_name if name == "__init__" else name
        sigs = _signatures(doc_name, doc)
        if not sigs:
            raise StubError("%s has no signature line in its docstring (add one, or an "
                            "OVERRIDES entry)" % key)
        texts = [_render_sig(namer, name, p, r if name != "__init__" else "None", where,
                             self_arg=cls_name is not None) for p, r in sigs]
    if len(texts) > 1:
        return ["%s@overload\n%s%s" % (indent, indent, t) for t in texts]
    return [indent + texts[0]]


def _attr_type(namer, cls_name, name, obj):
    key = "%s.%s" % (cls_name, name)
    if key in OVERRIDES:
        return namer.ann(OVERRIDES[key], key)
    doc = obj.__doc__ or ""
    head = _split_top(_split_top(doc, ":")[0] if doc else "", ",")
    head = _strip_parens(head[0] if head else "")
    parts = [p.split()[0] for p in head.split(" or ") if p.split()]
    if not parts:
        raise StubError("%s: no type at the head of its docstring %r (add an OVERRIDES "
                        "entry)" % (key, doc[:40]))
    return namer.ann(" | ".join(parts), key)


def render(modname):
    """The stub text of module `modname` (imported)."""
    mod = importlib.import_module(modname)
    items = [(n, v) for n, v in vars(mod).items() if not n.startswith("__")]
    classes = [n for n, v in items if isinstance(v, type)]
    namer = Namer(classes)
    enums, others, funcs, consts = [], [], [], []
    for n, v in items:
        if isinstance(v, type) and issubclass(v, enum.Enum):
            enums.append((n, v))
        elif isinstance(v, type):
            others.append((n, v))
        elif callable(v):
            funcs.append((n, v))
        else:
            consts.append((n, v))
    # enums also reachable as class attributes get a module alias for the ClassVar
    nested = {m for _, v in others for m, a in vars(v).items()
              if isinstance(a, type) and m in classes}
    body = []
    for n, v in enums:
        body.append("class %s(enum.IntEnum):" % n)
        body.extend("    %s = %d" % (m.name, m.value) for m in v)
        body.append("")
        if n in nested:
            body.append("_%s: TypeAlias = %s" % (n, n))
            body.append("")
    for n, v in others:
        body.append("class %s:" % n)
        lines = []
        if v.__doc__ and v.__doc__.startswith(n + "("):
            lines += _method_lines(namer, n, "__init__", v.__doc__, "    ")
        elif "%s.__init__" % n in OVERRIDES:
            lines += _method_lines(namer, n, "__init__", None, "    ")
        # Python classes re-exported by the module (mooncake/_store_extras.py): their
        # annotated attributes (string annotations: `from __future__ import annotations`)
        for m, t in vars(v).get("__annotations__", {}).items():
            lines.append("    %s: %s" % (m, namer.ann(str(t), "%s.%s" % (n, m))))
        for m, a in vars(v).items():
            if m.startswith("__") or (m.startswith("_") and inspect.isfunction(a)):
                continue
            if isinstance(a, type) and m in classes:  # TransferEngine.TransferOpcode
                lines.append("    %s: ClassVar[type[_%s]]" % (m, m))
            elif inspect.isgetsetdescriptor(a) or inspect.ismemberdescriptor(a):
                lines.append("    %s: %s" % (m, _attr_type(namer, n, m, a)))
            elif callable(a):
                lines += _method_lines(namer, n, m, a, "    ")
            else:
                raise StubError("%s.%s: cannot stub a %s" % (n, m, type(a).__name__))
        lines += ["    " + x for x in EXTRA.get(n, [])]
        body += lines or ["    ..."]
        body.append("")
    for n, v in funcs:
        body += _method_lines(namer, None, n, v, "")
    if funcs:
        body.append("")
    for n, v in consts:
        if isinstance(v, enum.Enum):
            body.append("%s: %s" % (n, type(v).__name__))
        elif isinstance(v, (bool, int, str, bytes, float)):
            body.append("%s: %s" % (n, type(v).__name__))
        else:
            raise StubError("%s: cannot stub a %s" % (n, type(v).__name__))
    text = "\n".join(body).rstrip() + "\n"
    head = ["# %s.pyi: type stubs of the %s extension module, generated by"
            % (modname.rsplit(".", 1)[1], modname),
            "# scripts/gen_stubs.py from the signature lines of its docstrings. Do not edit:",
            "# change the docstrings and regenerate (tests/integration/test_stubs.py checks).",
            "import enum"]
    if "Buffer" in namer.used:
        head.append("import sys")
    if "torch" in namer.used:
        head.append("import torch")
    typing_names = ["Any", "ClassVar", "TypeAlias", "overload"]
    head.append("from typing import %s" % ", ".join(
        t for t in typing_names if t in text))
    if "Buffer" in namer.used:
        head += ["", "if sys.version_info >= (3, 12):", "    from collections.abc import Buffer",
                 "else:", "    from typing_extensions import Buffer"]
    return "\n".join(head) + "\n\n" + text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = pathlib.Path(__file__).resolve().parent.parent
    ap.add_argument("--out", default=str(root / "python" / "mooncake"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    stale = []
    for modname in MODULES:
        text = render(modname)
        path = out / (modname.rsplit(".", 1)[1] + ".pyi")
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print("wrote", path)
    if stale:
        print("stale stubs (run scripts/gen_stubs.py):", " ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
