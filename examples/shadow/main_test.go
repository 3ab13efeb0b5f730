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

// TestDemo runs the demo: the scrapers top the heavy keys and sit above the
// recommendation, and the tuner walks 200 down in steps of at most 30% to
// the recommended limit.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	text := out.String()
	t.Log("\n" + text)
	assert.Regexp(t, `(heavy: scraper-\d +peak  320/s.*\n   ){3}`, text)
	m := regexp.MustCompile(`limit (\d+) \(p95`).FindStringSubmatch(text)
	require.NotNil(t, m)
	want, _ := strconv.Atoi(m[1])
	steps := regexp.MustCompile(`applied api: (\d+) -> (\d+)`).FindAllStringSubmatch(text, -1)
	require.NotEmpty(t, steps)
	for _, s := range steps {
		a, _ := strconv.Atoi(s[1])
		b, _ := strconv.Atoi(s[2])
		assert.GreaterOrEqual(t, float64(b), 0.7*float64(a)-1e-9)
	}
	assert.Equal(t, strconv.Itoa(want), steps[len(steps)-1][2])
	assert.Contains(t, text, "now: api: token-bucket "+strconv.Itoa(want)+"/s")
}
