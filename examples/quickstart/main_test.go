package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQuickstart runs the demo on the in-memory store and checks the
// decisions it prints: the burst passes, the rest are denied with a retry
// time, the retry succeeds, and the per-minute limit stops carol.
func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, ""))
	text := out.String()
	t.Log("\n" + text)
	lines := strings.Split(text, "\n")
	find := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return l
			}
		}
		t.Fatalf("no line starting with %q", prefix)
		return ""
	}
	assert.Contains(t, text, "store: in-memory (memstore)")
	// alice: 3 allowed, 2 denied.
	alice := text[strings.Index(text, "alice sends"):strings.Index(text, "bob sends")]
	assert.Equal(t, 3, strings.Count(alice, "allowed"))
	assert.Equal(t, 2, strings.Count(alice, "DENIED"))
	// Real time: a millisecond or two may pass between the requests.
	assert.Regexp(t, `retry after (9\d|100)ms`, alice)
	assert.Regexp(t, `full again in (9\d|100)ms`, find("request 1: allowed (remaining 2 of 3"))
	assert.Contains(t, text[strings.Index(text, "bob sends"):], "request 1: allowed (remaining 2 of 3")
	assert.Contains(t, find("request 6:"), "allowed")
	assert.Contains(t, text, "admitted after waiting")
	carol := text[strings.Index(text, "carol"):]
	// 3 pass (burst of the per-second bucket), then after 300ms 3 tokens
	// per second are back but the per-minute burst of 4 allows only one more.
	assert.Equal(t, 4, strings.Count(carol, "allowed"), carol)
	assert.Equal(t, 2, strings.Count(carol, "DENIED"), carol)
}
