#!/usr/bin/env python3
"""scripts/check_layers.py: checks that every `#include "..."` follows the layer table.

The table below (LAYERS and the rules under it) is the one place the layering of
mooncake-c is written; CONTRIBUTING.md quotes it (this script checks the quote) and
docs/architecture.md draws it. `make test` runs this first.

    scripts/check_layers.py              check the tree this script lies in (exit 1 on a
                                         violation, one line per include: file:line, rule)
    scripts/check_layers.py --root DIR   check another tree
    scripts/check_layers.py --table      print the table (what CONTRIBUTING.md quotes)
    scripts/check_layers.py --self-test  plant wrong includes in temporary trees and
                                         expect each to fail with the right rule

Files checked: every .c and .h under src/, tools/, bench/ and tests/. A module is a
directory src/<module>/ (whatever files it holds, so files may be split or renamed
freely); programs (tools/, bench/, tests/) sit above every module. An include is
resolved as the compiler does: next to the including file, then include/, then src/;
generated headers are matched by GENERATED. Python's standard library only.
"""
import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile

# ------------------------------------------------------------------------- the table
# Modules from the lowest layer to the highest. A module may include its own files, the
# headers of any lower module, and the public headers include/mooncake/*.h of its own
# layer or below; nothing upward, nothing sideways (same layer, other module).
LAYERS = [
    ("common", "log, status codes, options, time, env, xalloc, list, sync, auth, fdio"),
    ("net", "sockets, event loop, frames, connections"),
    ("alloc", "the offset allocator"),
    ("disk", "client-owned disk store: buckets, index, io_uring I/O"),
    ("rpc", "master wire types, arena, limits"),
    ("metadata", "metadata backends, HTTP server"),
    ("transfer", "the transfer engine"),
    ("master", "master service, RPC server, admin HTTP"),
    ("client", "store client, master RPC client"),
    ("python", "extension modules store, engine"),
]
# Modules that may include less than "everything lower": module -> the only ones allowed.
ONLY = {"rpc": {"common"}}
HEADER_ONLY = {"rpc"}
# Pairs that never include each other, whatever their order. The master does no disk I/O
# (issue 14): it tracks LOCAL_DISK replicas as metadata; the owning client reads them.
NEVER = [("master", "client"), ("master", "disk")]
# An internal header (`<module>/internal.h`, `store_internal.h`, ...) is included only by
# its own module (and by that module's unit tests, tests/unit/<module>/).
INTERNAL = ["internal.h", "*_internal.h"]
# Public headers include/mooncake/<name> owned by a module above common (the rest, log.h,
# status.h, options.h, mc_time.h, mc_api.h, ..., belong to common: anyone may include them).
PUBLIC_OWNER = {"metadata.h": "metadata", "transfer_engine.h": "transfer", "store.h": "client"}
# Generated headers (in the build tree): pattern -> the layer they sit in. proto/*.proto
# becomes <name>.pb-c.h, the master's wire schema, at the rpc layer.
GENERATED = {"*.pb-c.h": "rpc"}
PROGRAM_DIRS = ("tools", "bench", "tests")
# ----------------------------------------------------------------------------------

RANK = {m: i for i, (m, _) in enumerate(LAYERS)}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
QUOTE_BEGIN = "<!-- layer table: scripts/check_layers.py --table -->"
QUOTE_END = "<!-- end of layer table -->"


def allowed(module):
    """The modules `module` may include besides itself."""
    if module in ONLY:
        return sorted(ONLY[module], key=RANK.get)
    lower = [m for m, _ in LAYERS if RANK[m] < RANK[module]]
    banned = {b for a, b in NEVER if a == module} | {a for a, b in NEVER if b == module}
    return [m for m in lower if m not in banned]


def table():
    rows = [("layer", "module", "owns", "may include (and itself, include/mooncake/)")]
    for m, owns in LAYERS:
        rows.append((str(RANK[m]), m, owns, " ".join(allowed(m)) or "-"))
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(r[i].ljust(w[i]) for i in range(3)) + "  " + r[3] for r in rows]
    lines += ["",
              "never: " + ", ".join(f"{a} <-> {b}" for a, b in NEVER),
              "header-only: " + ", ".join(sorted(HEADER_ONLY)),
              "internal headers (" + ", ".join(INTERNAL) + "): only their own module "
              "and tests/unit/<module>/",
              "public headers owned above common: " +
              ", ".join(f"{h} ({m})" for h, m in PUBLIC_OWNER.items()),
              "programs (tools/, bench/, tests/): any module's non-internal headers"]
    return "\n".join(line.rstrip() for line in lines)


def is_internal(path):
    return any(fnmatch.fnmatch(os.path.basename(path), p) for p in INTERNAL)


def owner(root, path):
    """(kind, name) of a file relative to root: ("module", m), ("program", top dir),
    ("public", owning module), or ("other", top dir)."""
    parts = path.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return "module", parts[1]
    if parts[0] == "include":
        return "public", PUBLIC_OWNER.get(parts[-1], "common")
    if parts[0] in PROGRAM_DIRS:
        if parts[0] == "tests" and len(parts) > 3 and parts[1] == "unit":
            return "program", "tests/unit/" + parts[2]
        return "program", parts[0]
    return "other", parts[0]


def resolve(root, src, name):
    """Path (relative to root) the compiler would find for #include "name" in src,
    ("generated", layer) for a generated header, or None."""
    here = os.path.dirname(src)
    for base in (here, "include", "src"):
        cand = os.path.normpath(os.path.join(base, name))
        if not cand.startswith("..") and os.path.isfile(os.path.join(root, cand)):
            return cand.replace(os.sep, "/")
    for pat, layer in GENERATED.items():
        if fnmatch.fnmatch(os.path.basename(name), pat):
            return ("generated", layer)
    return None


def sources(root):
    for top in ("src",) + PROGRAM_DIRS:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if not x.startswith("."))
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")


def check_include(root, src, name):
    """The rule `#include "name"` in src breaks, or None."""
    kind, who = owner(root, src)
    target = resolve(root, src, name)
    if target is None:
        return ("unresolved include: not next to the file, not in include/ or src/, and "
                "not a generated header known to GENERATED in scripts/check_layers.py")
    if isinstance(target, tuple):
        tkind, twho = "module", target[1]
        internal, tpath = False, name
    else:
        tkind, twho = owner(root, target)
        internal, tpath = is_internal(target), target
    if kind == "other":
        return None                  # reported once by check(): a file outside any module
    if kind == "module" and who not in RANK:
        return None                  # reported once by check()
    if tkind == "module" and twho not in RANK:
        return f"{tpath}: src/{twho}/ is not a module of the layer table (add it to LAYERS)"
    if tkind == "other" or (tkind == "program" and kind != "program"):
        return f"includes {tpath}, which is not a header of a module or include/mooncake/"
    if tkind == "program":
        return None                  # a test's or tool's own helper header
    if tkind == "public":
        if kind == "module" and RANK[twho] > RANK[who]:
            return (f"upward include: include/mooncake/{os.path.basename(tpath)} belongs "
                    f"to {twho}, above {who}")
        return None
    # tkind == "module"
    if kind == "program":
        if internal and who != f"tests/unit/{twho}":
            return (f"internal header of {twho} ({tpath}): only {twho} itself and "
                    f"tests/unit/{twho}/ include it")
        return None
    if twho == who:
        return None
    if not tpath.endswith(".h"):
        return f"includes {tpath}: only headers may be included from another module"
    if internal:
        return f"internal header of another module: {who} includes {tpath} (of {twho})"
    for a, b in NEVER:
        if {a, b} == {who, twho}:
            return f"{a} and {b} never include each other: {who} includes {tpath}"
    if who in ONLY and twho not in ONLY[who]:
        return (f"{who} may include only {' '.join(sorted(ONLY[who]))}: "
                f"it includes {tpath} ({twho})")
    if RANK[twho] > RANK[who]:
        return f"upward include: {who} includes {tpath} ({twho} is above {who})"
    if RANK[twho] == RANK[who]:
        return f"sideways include: {who} includes {tpath} ({twho}, same layer)"
    return None


def check(root):
    """Every violation under root, as 'file:line: #include "x": rule' strings."""
    errors = []
    for m in sorted(HEADER_ONLY):
        for f in sources(root):
            if f.startswith(f"src/{m}/") and not f.endswith(".h"):
                errors.append(f"{f}:1: {m} is header-only: no .c files in src/{m}/")
    for f in sources(root):
        kind, who = owner(root, f)
        if kind == "other":
            errors.append(f"{f}:1: a C file outside src/<module>/, tools/, bench/, tests/")
        elif kind == "module" and who not in RANK:
            errors.append(f"{f}:1: src/{who}/ is not a module of the layer table (add it to "
                          "LAYERS in scripts/check_layers.py, then quote the new table)")
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE_RE.match(line)
                if m:
                    why = check_include(root, f, m.group(1))
                    if why:
                        errors.append(f'{f}:{n}: #include "{m.group(1)}": {why}')
    doc = os.path.join(root, "CONTRIBUTING.md")
    if os.path.isfile(doc):
        text = open(doc, encoding="utf-8").read()
        quoted = None
        if QUOTE_BEGIN in text and QUOTE_END in text:
            quoted = text.split(QUOTE_BEGIN, 1)[1].split(QUOTE_END, 1)[0]
            lines = quoted.strip("\n").splitlines()
            if lines and lines[0].startswith("```"):
                lines = lines[1:]
            if lines and lines[-1].startswith("```"):
                lines = lines[:-1]
            quoted = "\n".join(lines)
        if quoted != table():
            errors.append("CONTRIBUTING.md:1: the layer table quoted between "
                          f"'{QUOTE_BEGIN}' and '{QUOTE_END}' differs from "
                          "`scripts/check_layers.py --table`: paste its output there")
    return errors


# ------------------------------------------------------------------------ self-test

def _write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as fh:
        fh.write(text)


def _synthetic(root):
    """A small tree: every module with a header and an internal header, a public header
    per owner, and only allowed includes."""
    for m in RANK:
        _write(root, f"src/{m}/{m}.h", "")
        _write(root, f"src/{m}/internal.h", "")
    _write(root, "include/mooncake/status.h", "")
    for h in PUBLIC_OWNER:
        _write(root, f"include/mooncake/{h}", "")
    _write(root, "src/common/a.c", '#include "mooncake/status.h"\n#include "common/internal.h"\n')
    _write(root, "src/rpc/types.h", '#include "common/common.h"\n')
    _write(root, "src/client/a.c", '#include "internal.h"\n#include "net/net.h"\n'
           '#include "rpc/rpc.h"\n#include "master.pb-c.h"\n#include "mooncake/store.h"\n')
    _write(root, "src/master/a.c", '#include "alloc/alloc.h"\n#include "master/internal.h"\n')
    _write(root, "tests/unit/master/t.c", '#include "master/internal.h"\n#include "util.h"\n')
    _write(root, "tests/unit/master/util.h", "")
    _write(root, "tools/x.c", '#include "client/client.h"\n#include "master/master.h"\n')


# (file to add, its text, words the failure must name)
_CASES = [
    ("src/common/bad.c", '#include "net/net.h"\n', "upward include"),
    ("src/metadata/bad.c", '#include "python/python.h"\n', "upward include"),
    ("src/client/bad.c", '#include "master/master.h"\n', "never include each other"),
    ("src/master/bad.c", '\n#include "client/client.h"\n', "never include each other"),
    ("src/master/bad.c", '#include "disk/disk.h"\n', "never include each other"),
    ("src/transfer/bad.c", '#include "metadata/internal.h"\n', "internal header"),
    ("src/client/bad.c", '#include "transfer/internal.h"\n', "internal header"),
    ("src/rpc/bad.h", '#include "net/net.h"\n', "rpc may include only common"),
    ("src/rpc/bad.c", '', "header-only"),
    ("src/common/bad.c", '#include "mooncake/store.h"\n', "upward include"),
    ("src/common/bad.c", '#include "nowhere.h"\n', "unresolved include"),
    ("src/newmod/x.c", '', "not a module of the layer table"),
    ("tools/bad.c", '#include "client/internal.h"\n', "internal header of client"),
    ("tests/unit/net/bad.c", '#include "master/internal.h"\n', "internal header of master"),
    ("src/net/bad.c", '#include "common/a.c"\n', "only headers"),
]


def self_test():
    failures = []
    with tempfile.TemporaryDirectory(prefix="check_layers.") as tmp:
        # 1. the synthetic tree passes; each planted include fails, naming file:line and rule
        base = os.path.join(tmp, "synthetic")
        _synthetic(base)
        errs = check(base)
        if errs:
            failures.append("the clean synthetic tree fails: " + "; ".join(errs))
        for path, text, words in _CASES:
            case = os.path.join(tmp, "case")
            shutil.copytree(base, case)
            _write(case, path, text)
            errs = check(case)
            line = text.count("\n") if text else 1
            want = f"{path}:{line}:"
            if not any(e.startswith(want) and words in e for e in errs):
                failures.append(f"{path} with {text.strip() or '(empty)'!r}: expected "
                                f"'{want} ... {words}', got {errs or 'no error'}")
            shutil.rmtree(case)
        # 2. a copy of the real tree (its C files and CONTRIBUTING.md), run as a program:
        #    it passes as it is, and fails once a file of the lowest module includes a
        #    header of the highest, or the quoted table drifts.
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        real = os.path.join(tmp, "real")
        for top in ("src", "include") + PROGRAM_DIRS:
            if os.path.isdir(os.path.join(here, top)):
                shutil.copytree(os.path.join(here, top), os.path.join(real, top),
                                ignore=lambda d, names: [n for n in names if not (
                                    n.endswith((".c", ".h")) or
                                    os.path.isdir(os.path.join(d, n)))])
        if os.path.isfile(os.path.join(here, "CONTRIBUTING.md")):
            shutil.copy(os.path.join(here, "CONTRIBUTING.md"), real)
        me = [sys.executable, os.path.abspath(__file__), "--root", real]
        r = subprocess.run(me, capture_output=True, text=True)
        if r.returncode != 0:
            failures.append("the copy of this tree fails before any change (run "
                            "scripts/check_layers.py to see why):\n" + r.stdout)
        low, high = LAYERS[0][0], LAYERS[-2][0]      # common, and client (below python)
        low_c = sorted(f for f in sources(real) if f.startswith(f"src/{low}/")
                       and f.endswith(".c"))
        high_h = sorted(f for f in sources(real) if f.startswith(f"src/{high}/")
                        and f.endswith(".h") and not is_internal(f))
        if not low_c or not high_h:
            failures.append(f"no .c file in src/{low}/ or no header in src/{high}/ to "
                            "plant a wrong include with")
        else:
            victim, header = low_c[0], high_h[0][len("src/"):]
            with open(os.path.join(real, victim), "a") as fh:
                fh.write(f'#include "{header}"\n')
            n = sum(1 for _ in open(os.path.join(real, victim)))
            r = subprocess.run(me, capture_output=True, text=True)
            want = f"{victim}:{n}: #include \"{header}\": upward include"
            if r.returncode != 1 or want not in r.stdout:
                failures.append(f"planting #include \"{header}\" in {victim}: expected exit "
                                f"1 and '{want}', got exit {r.returncode}:\n{r.stdout}")
            else:
                print(f"self-test: the planted wrong include fails as it should:\n  "
                      + next(ln for ln in r.stdout.splitlines() if want in ln))
        doc = os.path.join(real, "CONTRIBUTING.md")
        if os.path.isfile(doc):
            text = open(doc).read().replace(f"{LAYERS[1][0]} ", f"{LAYERS[1][0]}x ", 1)
            open(doc, "w").write(text)
            r = subprocess.run(me, capture_output=True, text=True)
            if r.returncode != 1 or "CONTRIBUTING.md:1: the layer table" not in r.stdout:
                failures.append("a changed quote of the table in CONTRIBUTING.md was not "
                                f"caught: exit {r.returncode}:\n{r.stdout}")
    for f in failures:
        print("self-test FAILED: " + f)
    if not failures:
        print(f"self-test: OK ({len(_CASES)} planted includes in a synthetic tree, one in a "
              "copy of this tree, and a drifted quote, all caught)")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", help="tree to check (default: this script's repository)")
    ap.add_argument("--table", action="store_true", help="print the layer table")
    ap.add_argument("--self-test", action="store_true", help="check the checker")
    a = ap.parse_args()
    if a.table:
        print(table())
        return 0
    if a.self_test:
        return self_test()
    root = a.root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for e in errors:
        print(e)
    n = sum(1 for _ in sources(root))
    if errors:
        print(f"check_layers: {len(errors)} violation(s) of the layer table "
              "(scripts/check_layers.py --table prints it)")
        return 1
    print(f"check_layers: OK, {n} files follow the layer table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
