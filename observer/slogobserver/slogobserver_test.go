package slogobserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

// capture is a slog.Handler that keeps every record it is given at or above
// its level.
type capture struct {
	min     slog.Level
	mu      sync.Mutex
	records []slog.Record
}

func (c *capture) Enabled(_ context.Context, l slog.Level) bool { return l >= c.min }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.records = append(c.records, r.Clone())
	c.mu.Unlock()
	return nil
}

func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func attrs(r slog.Record) map[string]slog.Value {
	m := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value
		return true
	})
	return m
}

func TestDefaultLevelsAndAttributes(t *testing.T) {
	h := &capture{min: slog.LevelDebug}
	o, err := New(slog.New(h))
	require.NoError(t, err)

	o.Observe(floodgate.Event{Policy: "per-peer", Route: "/svc/A", Outcome: floodgate.OutcomeAllowed,
		Decision: floodgate.Decision{Allowed: true, Limit: 5, Remaining: 4}, Latency: 700 * time.Nanosecond})
	o.Observe(floodgate.Event{Policy: "per-peer", Tier: "edge", Route: "/svc/A", Outcome: floodgate.OutcomeDenied,
		Decision: floodgate.Decision{Limit: 5, RetryAfter: 150 * time.Millisecond}, Latency: time.Microsecond})
	o.Observe(floodgate.Event{Policy: "shared", Outcome: floodgate.OutcomeErrorClosed,
		Err: errors.New("redis: connection refused"), Latency: 2 * time.Millisecond})
	o.Observe(floodgate.Event{Policy: "adaptive", Outcome: floodgate.OutcomeShed})

	require.Len(t, h.records, 4)
	levels := []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelError, slog.LevelWarn}
	for i, r := range h.records {
		assert.Equal(t, levels[i], r.Level, "record %d", i)
		assert.Equal(t, defaultMessage, r.Message)
	}

	allowed := attrs(h.records[0])
	assert.Equal(t, "per-peer", allowed["policy"].String())
	assert.Equal(t, "allowed", allowed["outcome"].String())
	assert.Equal(t, "/svc/A", allowed["route"].String())
	assert.Equal(t, 700*time.Nanosecond, allowed["latency"].Duration())
	assert.Equal(t, int64(5), allowed["limit"].Int64())
	assert.Equal(t, int64(4), allowed["remaining"].Int64())
	assert.NotContains(t, allowed, "tier", "empty labels are left out")
	assert.NotContains(t, allowed, "retry_after")

	denied := attrs(h.records[1])
	assert.Equal(t, "edge", denied["tier"].String())
	assert.Equal(t, 150*time.Millisecond, denied["retry_after"].Duration())
	assert.Equal(t, int64(0), denied["remaining"].Int64())

	failed := attrs(h.records[2])
	assert.Equal(t, "redis: connection refused", failed["error"].String())
	assert.Equal(t, slog.KindString, failed["error"].Kind(), "the text, not the error value")
	assert.NotContains(t, failed, "limit", "no decision, no numbers")
}

func TestDisabledLevelsBuildNothing(t *testing.T) {
	h := &capture{min: slog.LevelInfo}
	o, err := New(slog.New(h))
	require.NoError(t, err)
	e := floodgate.Event{Policy: "x", Outcome: floodgate.OutcomeAllowed, Decision: floodgate.Decision{Allowed: true, Limit: 1}}
	o.Observe(e)
	assert.Empty(t, h.records, "allowed is Debug by default")
	allocs := testing.AllocsPerRun(100, func() { o.Observe(e) })
	assert.Zero(t, allocs)

	e.Outcome = floodgate.OutcomeWouldDeny
	o.Observe(e)
	require.Len(t, h.records, 1)
	assert.Equal(t, slog.LevelInfo, h.records[0].Level)
}

func TestOptions(t *testing.T) {
	h := &capture{min: slog.LevelDebug}
	o, err := New(slog.New(h), WithLevel(floodgate.OutcomeDenied, slog.LevelWarn), WithMessage("rate limit"))
	require.NoError(t, err)
	o.Observe(floodgate.Event{Outcome: floodgate.OutcomeDenied})
	require.Len(t, h.records, 1)
	assert.Equal(t, slog.LevelWarn, h.records[0].Level)
	assert.Equal(t, "rate limit", h.records[0].Message)
	assert.Equal(t, slog.LevelWarn, o.level(floodgate.OutcomeDenied))
	assert.Equal(t, slog.LevelInfo, o.level(floodgate.Outcome(200)), "unknown outcomes log at Info")

	for _, bad := range []Option{WithLevel(0, slog.LevelInfo), WithLevel(99, slog.LevelInfo), WithMessage(""), nil} {
		_, err := New(slog.Default(), bad)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	}
	_, err = New(nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
}

func BenchmarkObserve(b *testing.B) {
	e := floodgate.Event{Policy: "per-peer", Route: "/svc/A", Outcome: floodgate.OutcomeAllowed,
		Decision: floodgate.Decision{Allowed: true, Limit: 5, Remaining: 4}, Latency: 700 * time.Nanosecond}
	b.Run("disabled", func(b *testing.B) {
		o, _ := New(slog.New(slog.DiscardHandler))
		b.ReportAllocs()
		for b.Loop() {
			o.Observe(e)
		}
	})
	b.Run("text-handler", func(b *testing.B) {
		o, _ := New(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug})))
		b.ReportAllocs()
		for b.Loop() {
			o.Observe(e)
		}
	})
	b.Run("disabled-while-pending", func(b *testing.B) {
		o, _ := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
		f := floodgate.Event{Policy: "shared", Outcome: floodgate.OutcomeErrorOpen}
		o.Observe(f)
		o.Observe(f) // a count pending for 10s
		b.ReportAllocs()
		for b.Loop() {
			o.Observe(e)
		}
	})
	failing := floodgate.Event{Policy: "shared", Outcome: floodgate.OutcomeErrorOpen,
		Err: errors.New("store unavailable"), Latency: 3 * time.Millisecond}
	b.Run("failing-text-handler", func(b *testing.B) {
		o, _ := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
		b.ReportAllocs()
		for b.Loop() {
			o.Observe(failing)
		}
	})
	b.Run("failing-text-handler-parallel", func(b *testing.B) {
		o, _ := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				o.Observe(failing)
			}
		})
	})
}
