"""The type stubs of mooncake.store / mooncake.engine cannot drift: regenerated from the
installed extension modules (scripts/gen_stubs.py) they equal the shipped files, the
installed package carries them next to the extension modules with a py.typed marker, and
every public module item, class member and enum member has a stub entry."""
import ast
import enum
import importlib
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "python" / "mooncake"
MODULES = ["mooncake.store", "mooncake.engine"]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_stubs", ROOT / "scripts" / "gen_stubs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _short(modname):
    return modname.rsplit(".", 1)[1]


@pytest.mark.parametrize("modname", MODULES)
def test_regenerated_stub_matches_shipped(modname):
    text = _generator().render(modname)
    shipped = (SHIPPED / (_short(modname) + ".pyi")).read_text()
    assert text == shipped, (
        "%s.pyi is stale: run `.venv/bin/python scripts/gen_stubs.py` and commit the "
        "result" % _short(modname))


@pytest.mark.parametrize("modname", MODULES)
def test_installed_next_to_extension(modname):
    mod = importlib.import_module(modname)
    where = pathlib.Path(mod.__file__).parent
    stub = where / (_short(modname) + ".pyi")
    assert stub.is_file(), "no %s next to %s" % (stub.name, mod.__file__)
    assert stub.read_text() == (SHIPPED / stub.name).read_text()
    assert (where / "py.typed").is_file()


def _entries(tree):
    """{top-level name: set of member names (classes) or None}."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    members.update(t.id for t in item.targets if isinstance(t, ast.Name))
            out[node.name] = members
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = None
    return out


@pytest.mark.parametrize("modname", MODULES)
def test_every_public_member_has_a_stub(modname):
    mod = importlib.import_module(modname)
    entries = _entries(ast.parse((SHIPPED / (_short(modname) + ".pyi")).read_text()))
    missing = []
    for name, value in vars(mod).items():
        if name.startswith("_"):
            continue
        if name not in entries:
            missing.append(name)
            continue
        if not isinstance(value, type):
            continue
        if issubclass(value, enum.Enum):
            wanted = {m.name for m in value}
        else:
            wanted = {m for m in vars(value) if not m.startswith("_")}
        missing += ["%s.%s" % (name, m) for m in sorted(wanted - (entries[name] or set()))]
    assert not missing, "no stub entry for: " + ", ".join(missing)
