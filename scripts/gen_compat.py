#!/usr/bin/env python3
"""Writes docs/compatibility.md: every upstream name of tests/compat/upstream_names.txt,
looked up in the installed ``mooncake`` package, with its status here and the test that
covers it.

Status: ``yes`` (the name exists), ``CPU-only error`` (exists; fails with a clear error
without CUDA), ``not applicable`` (listed n/a, with the reason), ``missing`` (not found).
The covering test is the list's fourth column when given, else the first test file under
tests/ (sorted; test_compat.py itself excluded) that mentions the module's last
component and the name: ``.name`` or a
quoted ``"name"`` for attributes, the bare word for modules' top-level names and
programs.

Usage (with the interpreter the package is installed in):
    .venv/bin/python scripts/gen_compat.py            # rewrite docs/compatibility.md
    .venv/bin/python scripts/gen_compat.py --check    # exit 1 when it is stale
    .venv/bin/python scripts/gen_compat.py --list     # print "name<TAB>status" lines
Exit status: 0; 1 for --check on a stale file; 2 for a malformed list line.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(ROOT, "tests", "compat", "upstream_names.txt")
DOC = os.path.join(ROOT, "docs", "compatibility.md")
EXPECTS = ("yes", "cpu-only", "n/a", "missing")


class Entry:
    def __init__(self, lineno: int, name: str, expect: str, note: str, test: str):
        self.lineno, self.name, self.expect, self.note, self.test = (
            lineno, name, expect, note, test)
        self.module, _, self.path = name.partition(":")


def read_list(path: str = LIST) -> list[Entry]:
    """The entries of the list file; SystemExit(2) naming the line when one is bad."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            cols = [c.strip() for c in line.split("|")]
            if len(cols) < 2 or ":" not in cols[0] or cols[1] not in EXPECTS:
                sys.exit(f"{path}:{n}: expected '<module>:<name> | {'/'.join(EXPECTS)} | "
                         f"note [| test]', got {line!r}")
            cols += [""] * (4 - len(cols))
            if cols[1] == "n/a" and not cols[2]:
                sys.exit(f"{path}:{n}: an n/a name needs a reason")
            out.append(Entry(n, cols[0], cols[1], cols[2], cols[3]))
    return out


def exists(e: Entry) -> bool:
    """Whether the name resolves in the installed package (or the program is installed)."""
    if e.module == "bin":
        here = os.path.join(os.path.dirname(sys.executable), e.path)
        import shutil

        return os.path.exists(here) or shutil.which(e.path) is not None
    try:
        obj = importlib.import_module(e.module)
    except Exception:  # noqa: BLE001 - a module that does not import is missing
        return False
    for part in e.path.split("."):
        if not part:
            continue
        call = part.endswith("()")
        part = part[:-2] if call else part
        try:
            obj = getattr(obj, part)
            if call:
                obj = obj()
        except Exception:  # noqa: BLE001
            return False
    return True


def status(e: Entry, present: bool) -> str:
    if e.expect == "n/a":
        return "yes" if present else "not applicable"
    if not present:
        return "missing"
    return "CPU-only error" if e.expect == "cpu-only" else "yes"


_test_cache: dict[str, str] = {}


def _test_files() -> dict[str, str]:
    if not _test_cache:
        for d, _, files in os.walk(os.path.join(ROOT, "tests")):
            for f in files:
                if f.endswith(".py") and (f.startswith("test_") or f == "conftest.py") \
                        and f != "test_compat.py":
                    p = os.path.join(d, f)
                    with open(p, encoding="utf-8", errors="replace") as fh:
                        _test_cache[os.path.relpath(p, ROOT)] = fh.read()
    return _test_cache


def covering_test(e: Entry) -> str:
    if e.test:
        return e.test
    last = e.path.rstrip("()").split(".")[-1].rstrip("()")
    if e.module == "bin" or "." not in e.path:
        pat = re.compile(r"(?<![\w])" + re.escape(last) + r"(?![\w])")
    else:
        pat = re.compile(r"\." + re.escape(last) + r"(?![\w])|[\"']" + re.escape(last) +
                         r"[\"']")
    mod_last = e.module.split(".")[-1]
    files = _test_files()
    # only a file that also mentions the module counts (so "get" of the store is not
    # credited to a file about something else)
    for path in sorted(files):
        text = files[path]
        if pat.search(text) and (e.module == "bin" or mod_last in text):
            return path
    return ""


def render(entries: list[Entry]) -> str:
    rows = [(e, status(e, exists(e))) for e in entries]
    counts: dict[str, int] = {}
    for _, s in rows:
        counts[s] = counts.get(s, 0) + 1
    out = [
        "# Compatibility with upstream's `mooncake` package",
        "",
        "Generated by `scripts/gen_compat.py` from `tests/compat/upstream_names.txt` (the list",
        "of upstream names, built from `../shared/reference/upstream-mooncake.md`) by",
        "introspecting the installed package; `tests/integration/test_compat.py` fails when a",
        "name listed as present disappears or when this file is stale. Do not edit by hand:",
        "change the list or the package, then run `.venv/bin/python scripts/gen_compat.py`.",
        "",
        "Status: **yes** (present), **CPU-only error** (present; fails with a clear error on a",
        "machine without CUDA), **not applicable** (with the reason), **missing** (not",
        "implemented yet). \"Covering test\" is the first test file that exercises the name.",
        "",
        "Summary: " + ", ".join(f"{k}: {counts[k]}" for k in
                                ("yes", "CPU-only error", "not applicable", "missing")
                                if k in counts) + f" (of {len(rows)}).",
        "",
    ]
    groups: dict[str, list] = {}
    for e, s in rows:
        head = e.module if e.module != "bin" else "programs (console entry points and tools)"
        obj = e.path.split(".")[0] if "." in e.path and e.module != "bin" else ""
        groups.setdefault(f"{head}" + (f" — {obj.rstrip('()')}" if obj else ""), []).append((e, s))
    for title, items in groups.items():
        out += [f"## {title}", "", "| upstream name | ours | note | covering test |",
                "|---|---|---|---|"]
        for e, s in items:
            test = covering_test(e) if s in ("yes", "CPU-only error") else ""
            note = e.note.replace("|", "\\|")
            out.append(f"| `{e.path}` | {s} | {note} | {('`' + test + '`') if test else ''} |")
        out.append("")
    return "\n".join(out)


def _without_tests(doc: str) -> list[str]:
    """The doc's lines with the covering-test column of table rows cut off: which test
    file mentions a name first changes whenever a test is added, and that alone must not
    make the doc stale (the names and their status must match exactly)."""
    out = []
    for line in doc.splitlines():
        if line.startswith("| `"):
            line = line.rsplit("|", 2)[0]
        out.append(line)
    return out


def _named_tests(doc: str) -> set[str]:
    """The covering-test paths the doc names (they must exist)."""
    names = set()
    for line in doc.splitlines():
        if line.startswith("| `"):
            cell = line.rsplit("|", 2)[1].strip().strip("`")
            if cell:
                names.add(cell)
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the doc is stale")
    ap.add_argument("--list", action="store_true", help="print name<TAB>status")
    ap.add_argument("--output", default=DOC)
    args = ap.parse_args(argv)
    entries = read_list()
    if args.list:
        for e in entries:
            print(f"{e.name}\t{status(e, exists(e))}")
        return 0
    text = render(entries)
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as fh:
                old = fh.read()
        except FileNotFoundError:
            old = ""
        if _without_tests(old) != _without_tests(text):
            print(f"{args.output} is stale: run scripts/gen_compat.py", file=sys.stderr)
            return 1
        for path in _named_tests(old):
            if not os.path.exists(os.path.join(ROOT, path)):
                print(f"{args.output} names {path}, which does not exist: run "
                      "scripts/gen_compat.py", file=sys.stderr)
                return 1
        return 0
    with open(args.output, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {os.path.relpath(args.output, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
