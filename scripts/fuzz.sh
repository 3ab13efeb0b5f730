#!/usr/bin/env bash
# Runs every fuzz target of the module for a while (default 20s each):
#   ./scripts/fuzz.sh [duration]
# `go test` (and so scripts/test.sh) already runs each target's seed corpus;
# this script explores beyond it. New failing inputs land in testdata/fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
dur="${1:-20s}"
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		echo "==> $pkg $target"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$dur" "$pkg"
	done
done
