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

// TestClient runs the demo: every GET ends with 200 (the 429s were retried),
// and the POST is refused once and not retried.
func TestClient(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, 8, 12))
	text := out.String()
	t.Log("\n" + text)
	assert.Contains(t, text, "GET results: 12 x 200\n")
	assert.Contains(t, text, "POST refused with 429 after 1 attempt(s)")
	m := regexp.MustCompile(`on the wire: (\d+) GET attempts for 12 requests, (\d+) answered 429`).FindStringSubmatch(text)
	require.NotNil(t, m)
	attempts, _ := strconv.Atoi(m[1])
	throttled, _ := strconv.Atoi(m[2])
	assert.Equal(t, 12+throttled, attempts, "every extra attempt is a retry of a 429")
}
