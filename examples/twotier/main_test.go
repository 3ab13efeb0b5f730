package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTwoTier runs the demo: the global limit holds across both nodes, the
// headers name both policies and report the global (tighter) budget, and the
// edge keeps a flood away from the shared store.
func TestTwoTier(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, ""))
	text := out.String()
	t.Log("\n" + text)
	lines := regexp.MustCompile(`(?m)^\s+\d+ node [AB]: .*$`).FindAllString(text, -1)
	require.Len(t, lines, 14)
	for i, l := range lines[:10] {
		assert.Contains(t, l, ": 200 ", l)
		assert.Contains(t, l, `"edge"`, l)
		assert.Contains(t, l, `"global"`, l)
		// The remaining budget the client sees is the global one.
		assert.Contains(t, l, "X-RateLimit-Remaining: "+strconv.Itoa(9-i), l)
	}
	for _, l := range lines[10:] {
		assert.Contains(t, l, ": 429 ", l)
		assert.Contains(t, l, "Retry-After: 6", l)
		assert.Contains(t, l, "X-RateLimit-Remaining: 0", l)
	}
	m := regexp.MustCompile(`in (\d+)ms: (\d+) x 200, (\d+) x 429\n.*denied (\d+) of them in memory; only (\d+) reached`).FindStringSubmatch(text)
	require.NotNil(t, m)
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	ms, ok200, denied, edgeDenied, reached := n(1), n(2), n(3), n(4), n(5)
	assert.Equal(t, 200, ok200+denied)
	assert.Equal(t, 200, edgeDenied+reached, "every request was decided by the edge or reached the global tier")
	// The edge lets through at most its burst of 50 plus its refill of
	// 50/min during the flood (the first phase spent 7 of node A's tokens).
	assert.LessOrEqual(t, reached, 50-7+50*ms/60000+1)
	assert.Greater(t, edgeDenied, 0)
}
