package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

func tokenBucket(t testing.TB, r floodgate.Rate, burst int64) algo.Algorithm {
	t.Helper()
	a, err := bucket.Config{Rate: r, Burst: burst}.Algorithm()
	require.NoError(t, err)
	return a
}

// testStore is a store with its own key space and a timeout long enough
// for a loaded test machine (the timeout itself is tested in faults_test.go).
// With FLOODGATE_REDISSTORE_EVALONLY=1 it runs its scripts with EVALSHA, as
// on a server without functions (Redis 6): the functional and conformance
// tests then check that form of every script.
func testStore(t testing.TB, c rueidis.Client, opts ...Option) *Store {
	t.Helper()
	if os.Getenv("FLOODGATE_REDISSTORE_EVALONLY") == "1" {
		opts = append(opts, withEvalOnly())
	}
	s, err := New(c, append([]Option{WithPrefix(uniquePrefix(t)), WithTimeout(5 * time.Second)}, opts...)...)
	require.NoError(t, err)
	return s
}

func TestNewValidates(t *testing.T) {
	c := newClient(t, singleAddr)
	_, err := New(nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	for name, opt := range map[string]Option{
		"brace prefix":  WithPrefix("a{b"),
		"zero timeout":  WithTimeout(0),
		"zero option":   {},
		"nil fallback":  WithFailurePolicy(Fallback(nil, 2)),
		"nil derive fn": WithFailurePolicy(FallbackWith(newLocalStore(), nil)),
		"zero nodes":    WithFailurePolicy(Fallback(newLocalStore(), 0)),
		"minus nodes":   WithFailurePolicy(Fallback(newLocalStore(), -2)),
	} {
		_, err := New(c, opt)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, name)
	}
	s, err := New(c)
	require.NoError(t, err)
	assert.Equal(t, defaultTimeout, s.timeout)

	// An algorithm without a Lua twin cannot run on Redis.
	ctx := context.Background()
	noTwin := divided(tokenBucket(t, floodgate.PerSecond(1), 1), 2)
	_, err = s.Apply(ctx, "k", noTwin, 1)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = s.Apply(ctx, "k", nil, 1)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	out := make([]floodgate.Decision, 2)
	a := tokenBucket(t, floodgate.PerSecond(1), 1)
	_, err = s.ApplyAll(ctx, []store.Op{{Key: "k", Alg: a, N: 1}, {Key: "k", Alg: noTwin, N: 1}}, out, true)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = s.ApplyAll(ctx, []store.Op{{Key: "k", Alg: a, N: 0}}, out, true)
	assert.ErrorIs(t, err, floodgate.ErrInvalidCost)
	_, err = s.ApplyAll(ctx, []store.Op{{Key: "k", Alg: a, N: 1}, {Key: "k", Alg: a, N: 1}}, out[:1], true)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "fewer decisions than ops")
	all, err := s.ApplyAll(ctx, nil, nil, true)
	assert.NoError(t, err)
	assert.True(t, all, "no op: nothing refuses")
}

func TestTokenBucketOnRedis(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			s := testStore(t, c)
			l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 3})
			require.NoError(t, err)
			ctx := context.Background()
			for i := range 3 {
				d, err := l.Take(ctx, "user", 1)
				require.NoError(t, err)
				assert.True(t, d.Allowed)
				assert.Equal(t, int64(3), d.Limit)
				assert.Equal(t, int64(2-i), d.Remaining)
			}
			d, err := l.Take(ctx, "user", 1)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.Greater(t, d.RetryAfter, 59*time.Minute)
			assert.LessOrEqual(t, d.RetryAfter, time.Hour)
			require.NoError(t, l.Refund(ctx, "user", 2))
			d, err = l.Peek(ctx, "user")
			require.NoError(t, err)
			assert.Equal(t, int64(2), d.Remaining)
		})
	}
}

// The key carries a TTL equal to the time to full, and disappears when the
// state is full again.
func TestTTLIsTimeToFull(t *testing.T) {
	c := newClient(t, singleAddr)
	s := testStore(t, c)
	alg := tokenBucket(t, floodgate.PerSecond(10), 10) // 100ms per token
	ctx := context.Background()
	for range 5 {
		_, err := s.Apply(ctx, "k", alg, 1)
		require.NoError(t, err)
	}
	key := s.keyOf("k", alg)
	ttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	assert.Greater(t, ttl, int64(400))
	assert.LessOrEqual(t, ttl, int64(501))

	_, err = s.Apply(ctx, "k", alg, -10) // refund everything: full again
	require.NoError(t, err)
	n, err := c.Do(ctx, c.B().Exists().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n, "a full state is deleted")
}

func TestKeyLayout(t *testing.T) {
	c := newClient(t, singleAddr)
	s, err := New(c)
	require.NoError(t, err)
	alg := tokenBucket(t, floodgate.PerSecond(1), 1)
	for _, k := range []string{"", "{", "}", "a}b{", "{x}", "a{x}", "b{x}"} {
		rk := s.keyOf(k, alg)
		require.True(t, strings.HasPrefix(rk, defaultPrefix+"{"), rk)
		tag := rk[len(defaultPrefix)+1:]
		end := strings.IndexByte(tag, '}')
		require.Equal(t, 16, end, "the hash tag is 16 hex digits: %q", rk)
		assert.Equal(t, hex16(fnv64a(k)), tag[:end])
		assert.True(t, strings.HasSuffix(rk, ":"+k))
	}
	assert.NotEqual(t, s.keyOf("a{x}", alg)[:len(defaultPrefix)+18], s.keyOf("b{x}", alg)[:len(defaultPrefix)+18],
		"braces in the user key do not choose the slot")
}

func hostileKeys(t testing.TB) []string {
	bin := make([]byte, 64<<10)
	_, err := rand.Read(bin)
	require.NoError(t, err)
	return []string{"", "{", "}", "a}b{", "{}", "{a}", "a{b}c", "\r\n", "x\r\ny\r\n", "\x00", string(bin), string(bin[:100]) + "{tag}"}
}

// Hostile keys: no CROSSSLOT, no collision, no panic, on a single node and on
// the cluster, with single calls and multi-policy groups.
func TestHostileKeys(t *testing.T) {
	keys := hostileKeys(t)
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			s := testStore(t, c)
			one := tokenBucket(t, floodgate.PerHour(1), 1)
			m := allOf(t, s, tokenBucket(t, floodgate.PerHour(1), 2), tokenBucket(t, floodgate.PerHour(2), 1))
			ctx := context.Background()
			for i, k := range keys {
				d, err := s.Apply(ctx, k, one, 1)
				require.NoError(t, err, "key %d", i)
				require.True(t, d.Allowed, "key %d shares state with an earlier key", i)
				d, err = m.Take(ctx, k, 1)
				require.NoError(t, err, "key %d", i)
				require.True(t, d.Allowed, "key %d (multi) shares state with an earlier key", i)
			}
			for i, k := range keys {
				d, err := s.Apply(ctx, k, one, 1)
				require.NoError(t, err, "key %d", i)
				assert.False(t, d.Allowed, "key %d", i)
				d, err = m.Take(ctx, k, 1)
				require.NoError(t, err, "key %d", i)
				assert.False(t, d.Allowed, "key %d", i)
			}
		})
	}
}

// allOf is floodgate.All over keyed limiters of algs on s.
func allOf(t testing.TB, s store.Store, algs ...algo.Algorithm) floodgate.Limiter {
	t.Helper()
	ls := make([]floodgate.Limiter, len(algs))
	for i, a := range algs {
		l, err := store.NewLimiter(s, a)
		require.NoError(t, err)
		ls[i] = l
	}
	m, err := floodgate.All(ls...)
	require.NoError(t, err)
	return m
}

// Two policies on one key with floodgate.All: all-or-nothing, in one
// script (one EVALSHA per decision, however many policies).
func TestMultiAllOrNothing(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			s := testStore(t, c)
			perSec := tokenBucket(t, floodgate.PerSecond(10), 10)
			perHour := tokenBucket(t, floodgate.PerHour(15), 15)
			m := allOf(t, s, perSec, perHour)
			ctx := context.Background()

			calls := scriptCalls(t, c)
			d, err := m.Take(ctx, "u", 10)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			assert.Equal(t, int64(0), d.Remaining, "the per-second policy is the tightest")
			assert.Equal(t, int64(10), d.Limit)

			// The per-second policy denies: the hourly one must not be charged.
			for range 5 {
				d, err = m.Take(ctx, "u", 5)
				require.NoError(t, err)
				require.False(t, d.Allowed)
				assert.Positive(t, d.RetryAfter)
			}
			assert.Equal(t, int64(6), scriptCalls(t, c)-calls, "one script per multi-policy decision")
			hd, err := s.Apply(ctx, "u", perHour, 0)
			require.NoError(t, err)
			assert.Equal(t, int64(5), hd.Remaining, "a denied multi call consumed from the hourly policy")

			// Refunding gives back to both.
			require.NoError(t, m.(floodgate.Refunder).Refund(ctx, "u", 5))
			hd, err = s.Apply(ctx, "u", perHour, 0)
			require.NoError(t, err)
			assert.Equal(t, int64(10), hd.Remaining)

			_, err = m.Take(ctx, "u", 11)
			assert.ErrorIs(t, err, floodgate.ErrInvalidCost)
		})
	}
}

// scriptCalls sums the EVALSHA and EVAL calls the nodes of c have served
// (INFO commandstats).
func scriptCalls(t *testing.T, c rueidis.Client) int64 {
	return commandCalls(t, c, "evalsha") + commandCalls(t, c, "eval") + commandCalls(t, c, "fcall")
}

// The store reports only its own outcomes, with Source SourceStore: no
// event for what Redis decided (allowed, denied, a refund, a peek, a group),
// one for each call the failure policy decided.
func TestObserverOnlyStoreOutcomes(t *testing.T) {
	c := newClient(t, singleAddr)
	var events []floodgate.Event
	obs := floodgate.ObserverFunc(func(e floodgate.Event) { events = append(events, e) })
	s := testStore(t, c, WithObserver(obs), WithName("api"))
	alg := tokenBucket(t, floodgate.PerHour(1), 1)
	ctx := context.Background()
	for _, n := range []int64{1, 1, -1, 0} { // allowed, denied, refund, peek
		_, err := s.Apply(ctx, "k", alg, n)
		require.NoError(t, err)
	}
	out := make([]floodgate.Decision, 2)
	for range 2 { // a group admitted, then refused
		_, err := s.ApplyAll(ctx, []store.Op{{Key: "g", Alg: alg, N: 1}, {Key: "h", Alg: alg, N: 1}}, out, true)
		require.NoError(t, err)
	}
	assert.Empty(t, events, "decisions made by Redis are the transport's to report")

	proc, err := startRedis(0)
	require.NoError(t, err)
	dc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proc.addr}, DisableCache: true})
	require.NoError(t, err)
	defer dc.Close()
	proc.stop() // Redis is gone
	for _, tc := range []struct {
		policy  FailurePolicy
		outcome floodgate.Outcome
	}{
		{FailOpen(), floodgate.OutcomeErrorOpen},
		{FailClosed(time.Second), floodgate.OutcomeErrorClosed},
		{Fallback(newLocalStore(), 2), floodgate.OutcomeFallback},
		{FailError(), 0},
	} {
		events = nil
		s := testStore(t, dc, WithObserver(obs), WithName("api"), WithFailurePolicy(tc.policy), WithTimeout(50*time.Millisecond))
		_, aerr := s.Apply(ctx, "k", alg, 1)
		_, gerr := s.ApplyAll(ctx, []store.Op{{Key: "g", Alg: alg, N: 1}, {Key: "h", Alg: alg, N: 1}}, out, true)
		if tc.outcome == 0 {
			assert.ErrorIs(t, aerr, floodgate.ErrStoreUnavailable)
			assert.ErrorIs(t, gerr, floodgate.ErrStoreUnavailable)
			assert.Empty(t, events, "FailError: the caller reports")
			continue
		}
		require.NoError(t, aerr)
		require.NoError(t, gerr)
		require.Len(t, events, 2, "%v: one event per call", tc.outcome)
		for _, e := range events {
			assert.Equal(t, floodgate.SourceStore, e.Source)
			assert.Equal(t, tc.outcome, e.Outcome)
			assert.Equal(t, "api", e.Policy)
			assert.ErrorIs(t, e.Err, floodgate.ErrStoreUnavailable)
		}
	}
}

// A context the caller cancelled is the caller's error, under any policy.
func TestCallerContextWins(t *testing.T) {
	c := newClient(t, singleAddr)
	s := testStore(t, c, WithFailurePolicy(FailOpen()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Apply(ctx, "k", tokenBucket(t, floodgate.PerHour(1), 1), 1)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
}

// StepTwin refuses slices of different lengths and an algorithm without a
// Lua twin, and touches no key.
func TestStepTwinValidates(t *testing.T) {
	c := newClient(t, singleAddr)
	s := testStore(t, c)
	ctx := context.Background()
	alg := tokenBucket(t, floodgate.PerSecond(1), 2)
	states := make([]algo.State, 2)
	err := s.StepTwin(ctx, alg, states, []int64{1, 2}, []int64{1}, make([]floodgate.Decision, 2))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	err = s.StepTwin(ctx, divided(alg, 2), states, []int64{1, 2}, []int64{1, 1}, make([]floodgate.Decision, 2))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	writes := commandCalls(t, c, "set") + commandCalls(t, c, "del")
	out := make([]floodgate.Decision, 2)
	now := int64(1_700_000_000_000_000)
	require.NoError(t, s.StepTwin(ctx, alg, states, []int64{now, now}, []int64{1, 3}, out))
	assert.True(t, out[0].Allowed)
	assert.False(t, out[1].Allowed, "3 units above a burst of 2")
	assert.Equal(t, now+1_000_000, states[0].W[0])
	assert.Equal(t, writes, commandCalls(t, c, "set")+commandCalls(t, c, "del"), "StepTwin wrote a key")
}
