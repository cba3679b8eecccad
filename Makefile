# Two entry points (see README): `make serve` and `make test`.
MODEL ?= ../shared/models/stories260K.gguf
PORT ?= 8080
HOST ?= 127.0.0.1
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build serve test clean

deps:
	bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

serve: build
	$(BUILD)/pdserve serve --model $(MODEL) --host $(HOST) --port $(PORT)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -j 2

clean:
	rm -rf $(BUILD)
