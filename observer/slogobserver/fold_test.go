package slogobserver

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

var errDown = errors.New("redis: connection refused")

func failing(policy string, o floodgate.Outcome, s floodgate.Source) floodgate.Event {
	return floodgate.Event{Source: s, Policy: policy, Outcome: o, Err: errDown, Latency: time.Millisecond}
}

// folded returns a record's folded attribute, 0 when it has none.
func folded(r slog.Record) int64 {
	if v, ok := attrs(r)["folded"]; ok {
		return v.Int64()
	}
	return 0
}

// take returns the records written since the last call and forgets them.
func (c *capture) take() []slog.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.records
	c.records = nil
	return r
}

func TestFoldFirstAtOnceThenOncePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &capture{min: slog.LevelDebug}
		o, err := New(slog.New(h), WithFoldInterval(time.Second))
		require.NoError(t, err)
		e := failing("shared", floodgate.OutcomeErrorOpen, 0)

		o.Observe(e)
		rs := h.take()
		require.Len(t, rs, 1, "the first failure is written at once")
		assert.Equal(t, defaultMessage, rs[0].Message)
		assert.Equal(t, slog.LevelWarn, rs[0].Level)
		assert.NotContains(t, attrs(rs[0]), "folded", "nothing folded yet")
		assert.Equal(t, errDown.Error(), attrs(rs[0])["error"].String())

		for range 99 {
			time.Sleep(9 * time.Millisecond) // 891ms in all: within the interval
			o.Observe(e)
		}
		assert.Empty(t, h.take(), "failures within the interval are folded")

		// Other keys are their own: another policy, outcome or source.
		o.Observe(failing("other", floodgate.OutcomeErrorOpen, 0))
		o.Observe(failing("shared", floodgate.OutcomeErrorClosed, floodgate.SourceRequest))
		o.Observe(failing("shared", floodgate.OutcomeErrorOpen, floodgate.SourceStore))
		rs = h.take()
		require.Len(t, rs, 3)
		assert.Equal(t, slog.LevelError, rs[1].Level)
		assert.Equal(t, "store", attrs(rs[2])["source"].String())

		time.Sleep(109 * time.Millisecond) // 1s after the first record
		o.Observe(e)
		rs = h.take()
		require.Len(t, rs, 1)
		assert.Equal(t, int64(99), folded(rs[0]))
		assert.Equal(t, defaultMessage, rs[0].Message)

		// The next interval starts at that record.
		time.Sleep(999 * time.Millisecond)
		o.Observe(e)
		assert.Empty(t, h.take())
		time.Sleep(time.Millisecond)
		o.Observe(e)
		rs = h.take()
		require.Len(t, rs, 1)
		assert.Equal(t, int64(1), folded(rs[0]))

		// Ordinary decisions are not folded.
		for range 3 {
			o.Observe(floodgate.Event{Policy: "shared", Outcome: floodgate.OutcomeDenied, Decision: floodgate.Decision{Limit: 1}})
		}
		assert.Len(t, h.take(), 3)
	})
}

func TestFoldRecoveryAndFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &capture{min: slog.LevelInfo}
		o, err := New(slog.New(h), WithFoldInterval(time.Second))
		require.NoError(t, err)
		allowed := floodgate.Event{Policy: "shared", Outcome: floodgate.OutcomeAllowed, Decision: floodgate.Decision{Allowed: true, Limit: 5}}

		for range 10 {
			o.Observe(failing("shared", floodgate.OutcomeFallback, floodgate.SourceStore))
			o.Observe(failing("shared", floodgate.OutcomeFallback, 0))
		}
		require.Len(t, h.take(), 2)
		assert.Equal(t, int64(2), o.folds.pending.Load())

		// Recovered within the interval: the counts wait for its end.
		time.Sleep(500 * time.Millisecond)
		o.Observe(allowed)
		o.Observe(floodgate.Event{Policy: "unrelated", Outcome: floodgate.OutcomeAllowed})
		assert.Empty(t, h.take(), "allowed is Debug; the interval still runs")

		time.Sleep(500 * time.Millisecond)
		o.Observe(floodgate.Event{Policy: "unrelated", Outcome: floodgate.OutcomeAllowed})
		assert.Empty(t, h.take(), "another policy's decision does not write shared's counts")
		o.Observe(allowed)
		rs := h.take()
		require.Len(t, rs, 2, "one recovery record per pending key")
		got := map[string]int64{}
		for _, r := range rs {
			assert.Equal(t, foldedMessage, r.Message)
			assert.Equal(t, slog.LevelWarn, r.Level)
			a := attrs(r)
			assert.Equal(t, "shared", a["policy"].String())
			assert.Equal(t, "fallback", a["outcome"].String())
			src := "request"
			if v, ok := a["source"]; ok {
				src = v.String()
			}
			got[src] = a["folded"].Int64()
		}
		assert.Equal(t, map[string]int64{"request": 9, "store": 9}, got)
		assert.Zero(t, o.folds.pending.Load())
		o.Observe(allowed)
		assert.Empty(t, h.take(), "written once")

		// A failure within the interval the recovery record started is
		// folded; Flush writes it at once.
		o.Observe(failing("shared", floodgate.OutcomeFallback, 0))
		assert.Empty(t, h.take())
		o.Flush()
		rs = h.take()
		require.Len(t, rs, 1)
		assert.Equal(t, foldedMessage, rs[0].Message)
		assert.Equal(t, int64(1), folded(rs[0]))
		o.Flush()
		assert.Empty(t, h.take(), "nothing left to flush")
	})
}

func TestFoldIntervalOption(t *testing.T) {
	h := &capture{min: slog.LevelDebug}
	o, err := New(slog.New(h), WithFoldInterval(0))
	require.NoError(t, err)
	for range 5 {
		o.Observe(failing("shared", floodgate.OutcomeErrorClosed, 0))
	}
	o.Flush()
	rs := h.take()
	assert.Len(t, rs, 5, "zero turns folding off")
	for _, r := range rs {
		assert.NotContains(t, attrs(r), "folded")
	}

	_, err = New(slog.Default(), WithFoldInterval(-time.Second))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)

	d, err := New(slog.Default())
	require.NoError(t, err)
	assert.Equal(t, int64(defaultFoldInterval), d.folds.interval)
}

func TestFoldDisabledLevelFoldsNothing(t *testing.T) {
	h := &capture{min: slog.LevelError}
	o, err := New(slog.New(h))
	require.NoError(t, err)
	for range 3 {
		o.Observe(failing("shared", floodgate.OutcomeErrorOpen, 0)) // Warn: not enabled
	}
	assert.Zero(t, o.folds.pending.Load())
	o.Observe(failing("shared", floodgate.OutcomeErrorClosed, 0))
	require.Len(t, h.take(), 1)
}

func TestFoldCapAndOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &capture{min: slog.LevelDebug}
		o, err := New(slog.New(h), WithFoldInterval(time.Second))
		require.NoError(t, err)
		for i := range maxFoldedPolicies {
			o.Observe(failing(fmt.Sprint("p", i), floodgate.OutcomeErrorOpen, 0))
		}
		require.Len(t, h.take(), maxFoldedPolicies)

		// Full, every interval running: the next policies share the overflow.
		o.Observe(failing("late-1", floodgate.OutcomeErrorOpen, 0))
		o.Observe(failing("late-2", floodgate.OutcomeErrorOpen, 0))
		o.Observe(failing("late-2", floodgate.OutcomeErrorOpen, 0))
		rs := h.take()
		require.Len(t, rs, 1)
		assert.Equal(t, "late-1", attrs(rs[0])["policy"].String())
		assert.True(t, attrs(rs[0])["overflow"].Bool())
		assert.Len(t, o.folds.byPolicy, maxFoldedPolicies)

		// Intervals over and nothing pending: idle policies make room.
		time.Sleep(time.Second)
		o.Flush()
		rs = h.take()
		require.Len(t, rs, 1)
		assert.Equal(t, int64(2), folded(rs[0]))
		assert.True(t, attrs(rs[0])["overflow"].Bool())
		assert.NotContains(t, attrs(rs[0]), "policy")

		o.Observe(failing("late-3", floodgate.OutcomeErrorOpen, 0))
		rs = h.take()
		require.Len(t, rs, 1)
		assert.NotContains(t, attrs(rs[0]), "overflow", "room was made")
		assert.Len(t, o.folds.byPolicy, 1)
	})
}

// A 2 s outage at 2,000 decisions/s on one node behind a Fallback store:
// each decision gives the store's event and the request's.
func TestFoldOutageLines(t *testing.T) {
	run := func(opts ...Option) (lines int, counted int64) {
		synctest.Test(t, func(t *testing.T) {
			h := &capture{min: slog.LevelInfo}
			o, err := New(slog.New(h), opts...)
			require.NoError(t, err)
			for range 4000 {
				o.Observe(failing("global", floodgate.OutcomeFallback, floodgate.SourceStore))
				o.Observe(failing("global", floodgate.OutcomeFallback, 0))
				time.Sleep(500 * time.Microsecond)
			}
			// Redis is back: allowed decisions until the interval ends.
			for range 20000 {
				o.Observe(floodgate.Event{Policy: "global", Outcome: floodgate.OutcomeAllowed})
				time.Sleep(500 * time.Microsecond)
			}
			o.Flush()
			rs := h.take()
			lines = len(rs)
			for _, r := range rs {
				counted += 1 + folded(r)
				if r.Message == foldedMessage {
					counted-- // a count only
				}
			}
		})
		return lines, counted
	}
	before, n := run(WithFoldInterval(0))
	assert.Equal(t, 8000, before)
	assert.Equal(t, int64(8000), n)
	after, n := run()
	assert.Equal(t, 4, after, "one record per key at the start, one recovery record per key")
	assert.Equal(t, int64(8000), n, "every failure written or counted")
	t.Logf("2 s outage at 2,000 decisions/s: %d lines unfolded, %d folded (10 s interval)", before, after)
}

// Every failing decision is written or counted exactly once, whatever the
// interleaving of failures, recoveries and flushes.
func TestFoldConcurrentCountsEveryFailure(t *testing.T) {
	h := &capture{min: slog.LevelInfo}
	o, err := New(slog.New(h), WithFoldInterval(20*time.Microsecond))
	require.NoError(t, err)
	const workers, per = 4, 2000
	policies := []string{"a", "b"}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				p := policies[(w+i)%len(policies)]
				o.Observe(failing(p, floodgate.OutcomeErrorOpen, 0))
				if i%7 == 0 {
					o.Observe(floodgate.Event{Policy: p, Outcome: floodgate.OutcomeAllowed})
				}
				if i%500 == 0 {
					o.Flush()
				}
			}
		})
	}
	wg.Wait()
	o.Flush()
	total := map[string]int64{}
	rs := h.take()
	assert.Less(t, len(rs), workers*per, "some failures were folded")
	for _, r := range rs {
		n := folded(r)
		if r.Message == defaultMessage {
			n++
		}
		total[attrs(r)["policy"].String()] += n
	}
	assert.Equal(t, map[string]int64{"a": workers * per / 2, "b": workers * per / 2}, total)
	assert.Zero(t, o.folds.pending.Load())
}

func TestFoldDoesNotAllocate(t *testing.T) {
	h := &capture{min: slog.LevelDebug}
	o, err := New(slog.New(h), WithFoldInterval(time.Hour))
	require.NoError(t, err)
	e := failing("shared", floodgate.OutcomeErrorOpen, 0)
	o.Observe(e) // the policy's state, and its first record
	assert.Zero(t, testing.AllocsPerRun(1000, func() { o.Observe(e) }), "a folded failure")
	ok := floodgate.Event{Policy: "shared", Outcome: floodgate.OutcomeAllowed}
	quiet, err := New(slog.New(&capture{min: slog.LevelInfo}), WithFoldInterval(time.Hour))
	require.NoError(t, err)
	quiet.Observe(e)
	quiet.Observe(e)
	require.NotZero(t, quiet.folds.pending.Load())
	assert.Zero(t, testing.AllocsPerRun(1000, func() { quiet.Observe(ok) }), "a decision while a count is pending")
}
