# The README's commands. `make test` is what CI runs (through .ci/run).
.PHONY: test demo bench fuzz

test:
	./scripts/test.sh

demo:
	go run ./examples/quickstart

bench:
	cd benchmarks && go run ./cmd/report

fuzz:
	./scripts/fuzz.sh
