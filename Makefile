# Both main targets create .venv and install what they need: nothing else to set up.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NODE   ?= $(shell hostname -s)
SUITE  ?= default
MODEL  ?=
SERVER_KIND ?= auto

GPU_BUNDLE ?= gpu-bundle
GPU_PYTHON ?= python3
GPU_CHECK_ARGS ?=

.PHONY: test check bench bench-smoke bench-real bench-vllm bench-sglang lint faults docs clean gpu-bundle gpu-check

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,real,fleet,fast,router]'
	touch $(STAMP)

# the full suite, as CI runs it: two xdist workers, each module one unit, the real-server folders as two queues
# that start first (tests/conftest.py), so in-process modules run while servers load
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder --durations=30

# the edit-test loop (65-80 s on 2 idle cores): lint, then every test that starts no process (tests/conftest.py enforces `slow`)
check: lint
	$(PY) -m pytest -q -m "not slow and not oracle and not real_server"

lint: $(STAMP)
	$(VENV)/bin/ruff check harness tests scripts benchmarks
	$(VENV)/bin/ruff format --check harness tests scripts benchmarks
	$(VENV)/bin/mypy harness  # the package ships py.typed: its annotations must hold ([tool.mypy])

bench: $(STAMP)
	$(VENV)/bin/harness bench --node $(NODE) --suite $(SUITE) --server-kind $(SERVER_KIND) $(if $(MODEL),--model $(MODEL),)

bench-smoke: $(STAMP)
	$(VENV)/bin/harness bench --node $(NODE) --suite smoke --server-kind $(SERVER_KIND)

bench-real: $(STAMP)
	$(PY) -m harness.realserver.bench_llama --node llama-cpu

# SGLang 0.5.23's own server on this CPU: a pinned venv under the build cache, a tiny model, workloads/sglang-cpu/
bench-sglang: $(STAMP)
	$(PY) -m harness.realserver.bench_sglang --node sglang-cpu

bench-vllm: $(STAMP)
	$(PY) -m harness.realserver.bench_vllm --node vllm-cpu

# the wheel folder `make gpu-check` installs on a GPU node that has no network: the harness wheel and what the
# image lacks (cp312 manylinux x86_64, <= 64 MiB; git-ignored, it travels with the checkout: docs/telemetry.md)
gpu-bundle: $(STAMP)
	$(PY) scripts/gpu_bundle.py --out $(GPU_BUNDLE)

# on a GPU node, from the image's python (no venv, no network): transformers serve on cuda:0 through a
# launch: command profile, harness bench with NVML at full rate, the matmul probe, a --lock-clocks round trip;
# everything in $$OUT (else ./gpu-check-out). Without a GPU it refuses in one line (exit 2).
gpu-check:
	@$(GPU_PYTHON) scripts/gpu_check.py --bundle $(GPU_BUNDLE) $(GPU_CHECK_ARGS)

# writes reports/fault-report.md (ignored by git); nothing a user runs changes tracked files
faults: $(STAMP)
	$(PY) scripts/fault_report.py

# refreshes the committed samples: docs/sample/ and docs/sample.md, the README's first result (two runs of the default
# suite on the sim, the second only to say how far a repeat moves the figures), the fault and validate examples
docs: $(STAMP)
	$(VENV)/bin/harness bench --node cpu-sim --suite default --server-kind sim
	$(VENV)/bin/harness bench --node cpu-sim-repeat --suite default --server-kind sim
	$(PY) scripts/docs_sample.py summaries/cpu-sim.json --repeat summaries/cpu-sim-repeat.json
	HARNESS_UPDATE_DOCS=1 $(PY) -m pytest -q -p no:cacheprovider tests/report/test_html.py -k sample_suite_page  # the screenshot of the page (README, docs/reading-results.md)
	$(PY) scripts/fault_report.py --out docs/fault-report.md
	$(PY) scripts/validate_example.py --out docs/validate-example.md
	$(PY) -m tests.helpers.summary_doc  # the reference pages written from the code (tests check each)
	$(PY) -m tests.helpers.commands_doc
	$(PY) -m tests.helpers.architecture_doc

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
