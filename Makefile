# The two commands of the README:
#   make demo  - set up what the demo needs and run the main job on the embedded default
#                (the package is rebuilt only when its sources changed: scripts/setup.sh)
#   make test  - the layer check, then set everything up and run every test (C unit
#                tests, the same under ASan+UBSan, fuzz targets briefly, then pytest
#                against the package installed from the current sources)
VENV ?= .venv
PY := $(VENV)/bin/python
MESON ?= $(PY) -m mesonbuild.mesonmain
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: demo test check setup setup-demo unit unit-asan pytest fuzz bench clean

setup:
	@VENV=$(VENV) scripts/setup.sh

setup-demo:
	@VENV=$(VENV) scripts/setup.sh --demo

demo: setup-demo
	$(VENV)/bin/mooncake_trace_replay --demo

build/debug/build.ninja:
	$(MESON) setup build/debug -Dtests=enabled -Dwerror=true

build/asan/build.ninja:
	$(MESON) setup build/asan -Dtests=enabled -Dwerror=true \
	  -Db_sanitize=address,undefined -Db_lundef=false

unit: build/debug/build.ninja
	$(MESON) test -C build/debug --print-errorlogs

unit-asan: build/asan/build.ninja
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(MESON) test -C build/asan --print-errorlogs

# libFuzzer targets (tests/fuzz), each run briefly: FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 10
build/fuzz/build.ninja:
	CC=clang $(MESON) setup build/fuzz -Dfuzz=true -Dtests=disabled

fuzz: build/fuzz/build.ninja
	$(MESON) compile -C build/fuzz
	@set -e; ran=0; for t in build/fuzz/tests/fuzz/fuzz_*; do \
	  [ -f "$$t" ] && [ -x "$$t" ] || continue; n=$$(basename $$t); ran=$$((ran+1)); \
	  mkdir -p build/fuzz/corpus/$$n; \
	  seeds=""; [ -d tests/fuzz/corpus/$${n#fuzz_} ] && seeds=tests/fuzz/corpus/$${n#fuzz_}; \
	  echo "fuzz: $$n for $(FUZZ_SECONDS)s"; \
	  $$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=0 build/fuzz/corpus/$$n $$seeds \
	    > build/fuzz/$$n.log 2>&1 || { tail -40 build/fuzz/$$n.log; exit 1; }; \
	  grep -E '^Done|#[0-9]+.*DONE' build/fuzz/$$n.log | tail -1; \
	done; [ $$ran -gt 0 ] || { echo "fuzz: no target was built (clang with libFuzzer needed)"; exit 1; }

pytest:
	MC_FAULTS_MODE=ci $(PY) -m pytest -q tests/integration tests/faults tests/clients

# The include layering (the table is in scripts/check_layers.py), then its self-test:
# a copy of the tree with a deliberately wrong include must fail the check.
check:
	python3 scripts/check_layers.py
	python3 scripts/check_layers.py --self-test

test:
	$(MAKE) check
	$(MAKE) setup
	$(MAKE) unit
	$(MAKE) unit-asan
	$(MAKE) fuzz
	$(MAKE) pytest

clean:
	rm -rf build
