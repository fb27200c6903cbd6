# netstor: the two commands a newcomer types are `make demo` and `make test`.
# Everything else (virtualenv, pinned packages, generated RTL) is bootstrapped from here.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JOBS ?= 2

.PHONY: all venv rtl test test-fast formal bench eval demo clean distclean

all: rtl

$(STAMP): requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.lock
	rm -f $(VENV)/lib/python*/site-packages/netstor-dev.pth   # the pre-package layout
	touch $@

# `pip install -e .`: the netstor package (rtl/, sim/, sw/ folders, see setup.py) and its console
# scripts. Redone when the packaging or the set of top-level subpackages changes (an editable
# install maps each subpackage folder by name).
EDITABLE := $(VENV)/.editable
LAYOUT := $(sort $(dir $(wildcard rtl/netstor/*/__init__.py sim/netstor/*/__init__.py)))
$(EDITABLE): $(STAMP) pyproject.toml setup.py FORCE
	@if [ ! -e $@ ] || [ pyproject.toml -nt $@ ] || [ setup.py -nt $@ ] \
	    || [ "$$(cat $@)" != "$(LAYOUT)" ]; then \
	  echo "pip install -e . (netstor package)"; \
	  $(VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . \
	    && echo "$(LAYOUT)" > $@; fi

.PHONY: FORCE
FORCE:

venv: $(EDITABLE)

# RTL_EXTRA: offloads registered outside the default bitstream (bitstream=False) to build in too;
# the host schema (build/rtl/schema.json) follows. `make test` regenerates the default.
RTL_EXTRA ?=
rtl: $(EDITABLE)
	$(PY) -m netstor.build rtl --out build/rtl $(if $(RTL_EXTRA),--extra $(RTL_EXTRA))

# System packages the tests need (tshark for the Wireshark dissector test); apt only if missing.
.PHONY: sysdeps
sysdeps:
	@if command -v tshark >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "sysdeps: installing tshark (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >/dev/null \
	    || echo "sysdeps: WARNING: apt-get install tshark failed; the dissector test will fail"; \
	else echo "sysdeps: WARNING: tshark is missing and cannot be installed here (needs root and apt-get); install tshark (Wireshark CLI) yourself, or set NETSTOR_ALLOW_NO_TSHARK=1 to skip its test"; fi

# two phases: everything in parallel (xdist groups keep each Verilator build on one worker at a
# time), then the `solo` tests alone: they measure real time (the test bed against the
# simulator) and fail under the other worker's load
test: rtl sysdeps
	rc=0; $(PY) -m pytest -n $(JOBS) --dist loadgroup -q -m "not solo" || rc=$$?; \
	$(PY) -m pytest -q -m solo || rc=$$((rc ? rc : $$?)); exit $$rc

formal: $(EDITABLE)
	$(PY) -m pytest -n $(JOBS) -q formal

# make bench: pipeline simulation, per-block Yosys of every block and element instance
# (build/bench/synth.json), the experiments. BENCH_CORE=1 adds the whole-core Yosys run,
# hierarchical (every distinct module of netstor_core once, BENCH_CORE_JOBS at a time; about an
# hour of CPU the first time, cached per module after). BENCH_FLAGS: e.g. --jobs 2 (per-block
# Yosys runs at a time), --no-pipeline, --cached-only; results are cached by Verilog hash
# (build/bench/synth_cache). First the exact tables' load experiment (build/bench/exact_load.json,
# pure Python, ~2 min) and the hashed LPM's (build/bench/lpm_load.json: routes before the first
# failed add per prefix-length mix, 16K slots, ~2 min); the standalone benches (register bank incl. -uram, tables incl. the
# 16K LPM, GF engine) run inside netstor.bench. BENCH_LANE=1 adds the copy-lane core's
# whole-core run (synth.json["core_lane"], cached per module like the default core's)
BENCH_FLAGS ?=
BENCH_CORE ?= 0
BENCH_CORE_JOBS ?= 2
BENCH_LANE ?= 0
bench: rtl
	$(PY) -m netstor.bench.exact_load --sizes 65536,1024,64 --seeds 20 --out build/bench/exact_load.json
	$(PY) -m netstor.bench.lpm_load --size 16384 --banks 32 --seeds 3 --out build/bench/lpm_load.json
	$(PY) -m netstor.bench --out build/bench $(if $(filter 1,$(BENCH_CORE)),--core-synth --core-jobs $(BENCH_CORE_JOBS)) $(BENCH_FLAGS)
	$(if $(filter 1,$(BENCH_LANE)),$(PY) -m netstor.bench --out build/bench --core-only --core-variant lane --core-jobs $(BENCH_CORE_JOBS))
	$(PY) -m netstor.experiments --out build/bench

# the papers' figures in the virtual-time simulator (headline subset, <= 30 min on 2 cores):
# build/eval/report.md, summary.json, one PNG per figure. EVAL_FLAGS: e.g. --scale full
# --executor tcp://scheduler:8786 (a Dask cluster), --only netrs
EVAL_FLAGS ?=
eval: rtl
	$(PY) -m netstor.evaluation --out build/eval $(EVAL_FLAGS)

# the rack on one machine (needs root): storage servers and clients in network namespaces,
# every packet through the switch (golden model); `make demo-rtl`: the cocotb core demo
demo: rtl
	$(PY) -m netstor.testbed.demo

.PHONY: demo-rtl
demo-rtl: rtl
	$(PY) -m netstor.sim.demo

clean:
	rm -rf build

distclean: clean
	rm -rf $(VENV)
