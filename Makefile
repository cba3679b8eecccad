# Two entry points (see README): `make serve` and `make test`.
MODEL ?= ../shared/models/stories260K.gguf
PORT ?= 8080
HOST ?= 127.0.0.1
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build serve test test-sanitize test-tsan fuzz clean

deps:
	bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

# Only the server binary (the tests are built by `make test`).
serve: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS) --target pdserve
	$(BUILD)/pdserve serve --model $(MODEL) --host $(HOST) --port $(PORT)

# The Release suite, every fuzz target for 30 s, then every unit test again with ASan +
# UBSan (issue #20; about 15 min of build and 5-10 min of tests on the 2-core machine).
# The TSan suite (`make test-tsan`) is not in it yet: it has not had a clean run here.
test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -j 2
	$(MAKE) fuzz FUZZ_SECONDS=30
	$(MAKE) test-sanitize

# The unit tests with ASan + UBSan, Debug -O1 (the assertions — BlockPool invariants, ... —
# are on), in build-asan/.
SANITIZE_BUILD ?= build-asan
test-sanitize: deps
	JOBS=$(JOBS) SANITIZE_BUILD=$(SANITIZE_BUILD) scripts/sanitize.sh address

# The unit tests that run threads (engine, HTTP server, router, decode service, gateway,
# KV store) with TSan (clang), in build-tsan/.
TSAN_BUILD ?= build-tsan
test-tsan: deps
	JOBS=$(JOBS) SANITIZE_BUILD=$(TSAN_BUILD) scripts/sanitize.sh thread

FUZZ_SECONDS ?= 60
fuzz: deps
	scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(TSAN_BUILD) build-fuzz
