# The two commands of the README:
#   make demo  - set up what the demo needs and run the main job on the embedded default
#                (the package is rebuilt only when its sources changed: scripts/setup.sh)
#   make test  - the layer check, then set everything up and run every test (C unit
#                tests, the same under ASan+UBSan, fuzz targets briefly, then pytest
#                against the package installed from the current sources, then a subset
#                of it again with a cluster secret: pytest-auth)
VENV ?= .venv
PY := $(VENV)/bin/python
MESON ?= $(PY) -m mesonbuild.mesonmain
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: demo test check setup setup-demo unit unit-asan pytest pytest-auth fuzz bench clean

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

# The same package again with a cluster secret in every process (MC_TEST_AUTH=1,
# tests/integration/conftest.py), on a subset that reaches every port authenticated in
# about 90 s on the loaded 2-core box (chosen by --durations of a full authenticated run;
# docs/security.md "Testing in authenticated mode"): the store API over the master RPC,
# the HTTP metadata server and the engine's ports (TCP and same-host), the P2P handshake
# port, a master restart (re-handshake), raw signed metadata reads, the REST service, the
# Python metadata server, the dummy client's IPC, the SSD tier with a remote disk read
# (the disk-read server), HA leader/standby, a snapshot restore, the trace replay and a
# fault test; the raw clients of the TE ports and the RPC stand-in (conftest's
# handshake helpers). The whole suite authenticated: CONTRIBUTING.md.
I := tests/integration
AUTH_TESTS := \
  "$(I)/test_store_api.py::test_put_batch_and_get_batch[http]" \
  "$(I)/test_store_api.py::test_batch_put_from_and_batch_get_into[http]" \
  "$(I)/test_store_api.py::test_remove_batch_remove_remove_by_regex[http]" \
  "$(I)/test_store_api.py::test_upsert_family[http]" \
  "$(I)/test_store_api.py::test_remove_all" \
  "$(I)/test_store_api.py::test_setup_p2phandshake_cross_process[p2p]" \
  "$(I)/test_store_cluster.py::test_master_restart_clients_remount_and_keep_working[http]" \
  "$(I)/test_engine.py::test_round_trip_sizes[http-mixed]" \
  "$(I)/test_engine.py::test_notifications[p2p]" \
  "$(I)/test_engine.py::test_metadata_keys_as_upstream[http]" \
  "$(I)/test_master_rpc.py::test_upsert" \
  "$(I)/test_store_service.py::test_put_get_exist_remove" \
  "$(I)/test_http_metadata_server.py::test_keep_alive[python]" \
  "$(I)/test_dummy_client.py::test_two_dummies_share_one_real_client" \
  "$(I)/test_ssd_tier.py::test_owner_death_and_restart" \
  "$(I)/test_ha_master.py::test_leader_and_standby[etcd]" \
  "$(I)/test_ha_master.py::test_client_refuses_an_older_view" \
  "$(I)/test_transfer_engine_bench.py::test_garbage_on_data_and_handshake_ports" \
  "$(I)/test_master_snapshot.py::test_restart_restores_every_acknowledged_object" \
  "$(I)/test_trace_replay.py::test_store_replay_of_the_first_500_real_requests_on_2_nodes_matches_lru" \
  "tests/faults/test_issue10_faults.py::test_remount_after_master_restart_republishes_rpc_meta"

pytest-auth:
	MC_FAULTS_MODE=ci MC_TEST_AUTH=1 $(PY) -m pytest -q $(AUTH_TESTS)

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
	$(MAKE) pytest-auth

clean:
	rm -rf build
