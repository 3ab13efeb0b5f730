package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo against its own server on 127.0.0.1 and checks
// what the clients saw, call by call.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run([]string{"-demo"}, &out))
	t.Log("\n" + out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		`^plain client:$`,
		`^  /demo.Catalog/Get +peer +-> OK$`,
		`^  /demo.Catalog/Search +peer +-> OK$`,
		`^  /demo.Catalog/Search +peer +-> OK$`,
		`^  /demo.Catalog/Search +peer +-> ResourceExhausted "rate limit exceeded" \| RetryInfo: (9|10)s \| grpc-retry-pushback-ms set$`,
		`^  /demo.Internal/Report +svc-a +-> OK$`,
		`^  /demo.Internal/Report +svc-a +-> OK$`,
		`^  /demo.Internal/Report +svc-a +-> OK$`,
		`^  /demo.Internal/Report +svc-a +-> ResourceExhausted "rate limit exceeded" \| RetryInfo: (19|20)s \| grpc-retry-pushback-ms set$`,
		`^  /demo.Internal/Report +svc-b +-> OK$`,
		`^  /demo.Internal/Report +peer +-> OK$`,
		`^client with grpclimit.NewClient \(pushback per method\):$`,
		`^  /demo.Catalog/Search +peer +-> ResourceExhausted "rate limit exceeded" \| RetryInfo: (9|10)s$`,
		`^  /demo.Catalog/Get +peer +-> OK$`,
		`^  /demo.Catalog/Search +peer +-> DeadlineExceeded ".*pushback.*" \(not sent: held by pushback, failed in .*\)$`,
		// One event per (call, limit): per-peer counts the 2 calls it checks
		// alone and the 10 it checks beside search and per-service, the 3
		// those refused included (per-peer would have admitted them).
		`^server observer: per-peer allowed=12, search allowed=2, search denied=2, per-service allowed=5, per-service denied=1$`,
	}
	require.Len(t, lines, len(want))
	for i, re := range want {
		assert.Regexp(t, regexp.MustCompile(re), lines[i], "line %d", i+1)
	}
}

func TestBadFlag(t *testing.T) {
	var out bytes.Buffer
	assert.Error(t, run([]string{"-nope"}, &out))
}
