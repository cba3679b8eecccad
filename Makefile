# Two entry points (see README): `make serve` and `make test`.
MODEL ?= ../shared/models/stories260K.gguf
PORT ?= 8080
HOST ?= 127.0.0.1
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build serve test test-sanitize fuzz clean

deps:
	bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

serve: build
	$(BUILD)/pdserve serve --model $(MODEL) --host $(HOST) --port $(PORT)

# The Release suite, then every fuzz target for 30 s.
test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -j 2
	$(MAKE) fuzz FUZZ_SECONDS=30

# The unit tests with ASan + UBSan, Debug -O1 -g: the assertions (BlockPool invariants,
# ...) are on. Not yet part of `make test`: its from-scratch build has not been timed or
# run clean on this 2-core machine (issue #20).
SANITIZE_BUILD ?= build-asan
test-sanitize: deps
	cmake -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DPDSERVE_SANITIZE=address,undefined
	cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	cd $(SANITIZE_BUILD) && ctest --output-on-failure --timeout 900 -j 2

FUZZ_SECONDS ?= 60
fuzz: deps
	scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) build-fuzz
