package admit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/floodgate-go/floodgate"
)

// TestJudgeAndReport: checks a transport decided itself are judged as
// Decide judges them (deny, dry run, fallback) without being charged,
// refunded or held, and reported one event per check under the names
// given, a refusal counted only under the checks that refused.
func TestJudgeAndReport(t *testing.T) {
	a, b := named("a", allowed, nil), named("b", denied, nil)
	checks := func(da, db floodgate.Decision) []floodgate.Check {
		return []floodgate.Check{{Limiter: a, Key: "k", N: 1, Decision: da}, {Limiter: b, Key: "k", N: 1, Decision: db}}
	}
	delayed := allowed
	delayed.Delay = time.Hour
	fellBack := allowed
	fellBack.Fallback = true
	for _, tc := range []struct {
		name     string
		dryRun   bool
		da, db   floodgate.Decision
		kind     Kind
		outcomes map[string]string
	}{
		{"denied by one", false, allowed, denied, Deny, map[string]string{"A": "request allowed", "B": "request denied"}},
		{"dry run", true, allowed, denied, Admit, map[string]string{"A": "request allowed", "B": "request would_deny"}},
		{"admitted", false, allowed, allowed, Admit, map[string]string{"A": "request allowed", "B": "request allowed"}},
		{"a delay is not waited", false, delayed, allowed, Admit, map[string]string{"A": "request allowed", "B": "request allowed"}},
		{"fallback", false, fellBack, allowed, Admit, map[string]string{"A": "request fallback", "B": "request fallback"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			c := NewDynamic(Config{Name: "svc", Observer: rec, DryRun: tc.dryRun})
			cs := checks(tc.da, tc.db)
			start := time.Now()
			v := c.Judge(cs, floodgate.Combine(cs), nil)
			assert.Less(t, time.Since(start), time.Second, "Judge held the request")
			assert.Equal(t, tc.kind, v.Kind)
			c.Report(floodgate.SourceRequest, floodgate.Event{}, c.Start(), v, cs, []string{"A", "B"})
			assert.Equal(t, tc.outcomes, rec.outcomes(t))
			assert.Empty(t, a.takes, "Judge charged a limit")
			assert.Zero(t, a.refunds("k")+b.refunds("k"), "Judge refunded a limit")
		})
	}
	t.Run("errors follow the fail mode", func(t *testing.T) {
		rec := &recorder{}
		c := NewDynamic(Config{Name: "svc", Observer: rec, FailMode: FailClosed})
		v := c.Judge(nil, floodgate.Decision{}, errDown)
		assert.Equal(t, Unavailable, v.Kind)
		c.Report(floodgate.SourceShadow, floodgate.Event{}, 0, v, nil, nil)
		e := rec.one(t)
		assert.Equal(t, "svc", e.Policy, "a request without checks is reported under the core's Name")
		assert.Equal(t, floodgate.OutcomeErrorClosed, e.Outcome)
		assert.Equal(t, floodgate.SourceShadow, e.Source)
		assert.ErrorIs(t, e.Err, errDown)
	})
	t.Run("names nil: the checks' policies", func(t *testing.T) {
		rec := &recorder{}
		c := NewDynamic(Config{Observer: rec})
		cs := checks(allowed, denied)
		c.Report(floodgate.SourceRequest, floodgate.Event{}, 0, c.Judge(cs, floodgate.Combine(cs), nil), cs, nil)
		assert.Equal(t, map[string]string{"a": "request allowed", "b": "request denied"}, rec.outcomes(t))
	})
}
