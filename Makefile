# The two commands of the README:
#   make demo  - set everything up and run the main job on the embedded default
#   make test  - set everything up and run every test (C unit tests, the same under
#                ASan+UBSan, then pytest against the installed package)
VENV ?= .venv
PY := $(VENV)/bin/python
MESON ?= $(PY) -m mesonbuild.mesonmain
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: demo test setup setup-demo unit unit-asan pytest fuzz bench clean

setup:
	@VENV=$(VENV) scripts/setup.sh

setup-demo:
	@VENV=$(VENV) scripts/setup.sh --no-test-deps

demo: setup-demo
	$(PY) -m mooncake.demo

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

pytest:
	$(PY) -m pytest -q tests/integration

test: setup
	$(MAKE) unit
	$(MAKE) unit-asan
	$(MAKE) pytest

clean:
	rm -rf build
