package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/internal/redistest"
)

// TestTwoTier runs the demo on the test Redis: a leased decision is far
// cheaper than a Redis round trip and costs a handful of Redis calls per
// hundred thousand decisions; two nodes at twice the limit admit at most
// the global bound and close to it; the edge stops a flood in memory.
func TestTwoTier(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, redistest.Addr(t)))
	text := out.String()
	t.Log("\n" + text)
	num := func(s string) int64 { v, err := strconv.ParseInt(s, 10, 64); require.NoError(t, err); return v }

	m := regexp.MustCompile(`decision cost: leased (\S+), direct Redis (\S+) \(\d+x\); (\d+) decisions cost (\d+) Redis calls`).FindStringSubmatch(text)
	require.NotNil(t, m)
	leased, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	direct, err := time.ParseDuration(m[2])
	require.NoError(t, err)
	require.Less(t, leased*5, direct, "a leased decision costs no round trip")
	require.Less(t, num(m[4])*1000, num(m[3]), "at least 1000 decisions per Redis call")

	m = regexp.MustCompile(`(\d+) admitted, global bound (\d+) .*: ([\d.]+)% of it`).FindStringSubmatch(text)
	require.NotNil(t, m)
	admitted, bound := num(m[1]), num(m[2])
	require.LessOrEqual(t, admitted, bound+1)
	// Close to it: the lease tests hold 97% on four processes; here the
	// margin allows for the test machine's load (the whole suite runs
	// beside it with the race detector).
	require.GreaterOrEqual(t, admitted, bound*75/100)

	m = regexp.MustCompile(`flood of (\d+) requests at node A: (\d+) passed the edge`).FindStringSubmatch(text)
	require.NotNil(t, m)
	require.Less(t, num(m[2]), num(m[1])/2, "the edge stops most of the flood (its burst is 5x 100, refilling at 5x 2000/s)")
}
