"""bench/bench_store.py --passes: how one backend's passes become one result (the cell of
the pass with the median GB/s; a cell that failed in any pass stays failed). Only the
merge is exercised here, on result documents of the form the backend role writes; the
bench itself measures speed and is not run by the tests."""
import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench", "bench_store.py")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_store_under_test", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cell(api, gbps, p50, batch=128, **extra):
    c = {"op": "get", "api": api, "size": 4096, "batch": batch, "gbps": gbps,
         "values_per_s": None if gbps is None else gbps * 1e9 / 4096, "p50_ms": p50,
         "p99_ms": p50, "calls": 10}
    c.update(extra)
    return c


def doc(*cells, wall=1.0):
    return {"label": "ours-tcp", "path": "tcp", "cells": list(cells), "errors": [],
            "wall_s": wall}


def test_one_pass_is_returned_as_is(bench):
    d = doc(cell("batch_get_into", 2.0, 0.2))
    assert bench.merge_passes([d]) is d


def test_each_cell_is_its_median_pass_whole(bench):
    docs = [doc(cell("batch_get_into", 2.3, 0.21), cell("get_into hot", 1.9, 0.30)),
            doc(cell("batch_get_into", 1.4, 0.35), cell("get_into hot", 2.6, 0.19)),
            doc(cell("batch_get_into", 2.0, 0.25), cell("get_into hot", 2.2, 0.24))]
    m = bench.merge_passes(docs)
    got = {c["api"]: c for c in m["cells"]}
    # the median pass differs per cell; every figure of a row comes from that pass
    assert (got["batch_get_into"]["gbps"], got["batch_get_into"]["p50_ms"]) == (2.0, 0.25)
    assert (got["get_into hot"]["gbps"], got["get_into hot"]["p50_ms"]) == (2.2, 0.24)
    assert got["batch_get_into"]["passes_gbps"] == [2.3, 1.4, 2.0]
    assert m["passes"] == 3 and m["wall_s"] == pytest.approx(3.0)
    # the inputs are left as they were
    assert docs[1]["cells"][0]["gbps"] == 1.4 and "passes_gbps" not in docs[1]["cells"][0]


def test_even_count_takes_the_lower_middle(bench):
    m = bench.merge_passes([doc(cell("batch_get_into", g, 0.2)) for g in (3.0, 1.0, 2.0, 4.0)])
    assert m["cells"][0]["gbps"] == 2.0


def test_a_cell_failed_in_one_pass_stays_failed(bench):
    docs = [doc(cell("batch_get_into", 2.0, 0.2)),
            doc(cell("batch_get_into", None, None, error="batch_get_into: [-704]")),
            doc(cell("batch_get_into", 2.1, 0.2))]
    c = bench.merge_passes(docs)["cells"][0]
    assert c["gbps"] is None and c["error"] == "batch_get_into: [-704]"
    assert c["passes_gbps"] == [2.0, None, 2.1]


def test_a_cell_missing_from_a_pass_is_an_error(bench):
    docs = [doc(cell("batch_get_into", 2.0, 0.2), cell("get_into hot", 2.0, 0.2)),
            doc(cell("batch_get_into", 2.1, 0.2)),          # that pass stopped early
            doc(cell("batch_get_into", 1.9, 0.2), cell("get_into hot", 2.2, 0.2))]
    got = {c["api"]: c for c in bench.merge_passes(docs)["cells"]}
    assert got["batch_get_into"]["gbps"] == 2.0
    assert got["get_into hot"]["gbps"] is None
    assert "2 of 3 passes" in got["get_into hot"]["error"]


def test_a_cell_missing_in_the_middle_leaves_the_later_cells_matched(bench):
    docs = [doc(cell("batch_get_into", 2.0, 0.2), cell("get_into hot", 2.0, 0.2),
                cell("get_into 2thr", 1.0, 0.4)),
            doc(cell("batch_get_into", 2.1, 0.2), cell("get_into 2thr", 1.2, 0.4)),
            doc(cell("batch_get_into", 1.9, 0.2), cell("get_into hot", 2.2, 0.2),
                cell("get_into 2thr", 1.1, 0.4))]
    got = {c["api"]: c for c in bench.merge_passes(docs)["cells"]}
    assert got["get_into 2thr"]["gbps"] == 1.1
    assert got["get_into 2thr"]["passes_gbps"] == [1.0, 1.2, 1.1]
    assert got["get_into hot"]["gbps"] is None
    assert got["get_into hot"]["passes_gbps"] == [2.0, None, 2.2]
    # a cell that only a later pass measured is kept, as an error
    docs[2]["cells"].append(cell("get", 0.5, 0.1, batch=1))
    got = {c["api"]: c for c in bench.merge_passes(docs)["cells"]}
    assert got["get"]["gbps"] is None and "1 of 3 passes" in got["get"]["error"]


def test_a_pass_that_measured_nothing_leaves_the_others_standing(bench):
    docs = [dict(doc(), unavailable="timed out"),
            doc(cell("batch_get_into", 2.0, 0.2)),
            doc(cell("batch_get_into", 2.4, 0.2))]
    m = bench.merge_passes(docs)
    assert "unavailable" not in m and m["failed_passes"] == [1]
    # the cell is the median of the passes that measured (lower middle of two)
    assert m["cells"][0]["gbps"] == 2.0
    assert m["cells"][0]["passes_gbps"] == [None, 2.0, 2.4]


def test_every_pass_unavailable_marks_the_backend(bench):
    docs = [dict(doc(), unavailable="exit status 1"), dict(doc(), unavailable="timed out")]
    m = bench.merge_passes(docs)
    assert m["unavailable"] == "exit status 1; timed out"
    assert m["cells"] == []
