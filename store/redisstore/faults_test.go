package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
)

// faultStore is one store under load in the fault test, with what its
// observer and its callers saw.
type faultStore struct {
	name  string
	store *Store
	lim   *store.Limiter

	byOutcome  [16]atomic.Int64
	admitted   [16]atomic.Int64 // admitted decisions by outcome
	badOpen    atomic.Int64     // fail-open events that were not allowed
	badClosed  atomic.Int64     // fail-closed events that were not denied with a RetryAfter
	badSource  atomic.Int64     // events without Source SourceStore
	early      atomic.Int64     // events before the kill, other than timeouts (a loaded machine)
	earlyErr   atomic.Value     // the error of the first of them
	killed     *atomic.Bool     // Redis was killed
	served     atomic.Int64     // calls decided by Redis (no store event, no error)
	errs       atomic.Int64     // errors returned to the caller
	wrongErrs  atomic.Int64     // errors not wrapping ErrStoreUnavailable
	maxLatency atomic.Int64     // slowest call, ns
	lastFail   atomic.Int64     // time (ns) of the last failure (a store event or an error)
	lastCall   atomic.Int64     // time (ns) the last call returned
	firstFall  atomic.Int64     // time (ns) of the first fallback decision
	restarted  *atomic.Int64    // time (ns) of the restart, 0 before
}

// recovered returns when the store went back to Redis after the restart:
// the time of its last failure (the store reports failures only, so the
// calls after it were Redis decisions), or 0 when no call followed it.
func (f *faultStore) recovered() int64 {
	last := max(f.lastFail.Load(), f.restarted.Load())
	if f.lastCall.Load() <= last {
		return 0
	}
	return last
}

func (f *faultStore) Observe(e floodgate.Event) {
	if e.Source != floodgate.SourceStore {
		f.badSource.Add(1)
	}
	if !f.killed.Load() && !errors.Is(e.Err, context.DeadlineExceeded) {
		f.early.Add(1)
		f.earlyErr.CompareAndSwap(nil, fmt.Sprint(e.Err))
	}
	f.lastFail.Store(time.Now().UnixNano())
	f.byOutcome[e.Outcome].Add(1)
	if e.Decision.Allowed {
		f.admitted[e.Outcome].Add(1)
	}
	switch e.Outcome {
	case floodgate.OutcomeFallback:
		f.firstFall.CompareAndSwap(0, time.Now().UnixNano())
	case floodgate.OutcomeErrorOpen:
		if !e.Decision.Allowed || e.Err == nil {
			f.badOpen.Add(1)
		}
	case floodgate.OutcomeErrorClosed:
		if e.Decision.Allowed || e.Decision.RetryAfter != time.Second || e.Err == nil {
			f.badClosed.Add(1)
		}
	}
}

func (f *faultStore) call(ctx context.Context) {
	start := time.Now()
	events := f.events()
	_, err := f.lim.Take(ctx, "k", 1)
	lat := int64(time.Since(start))
	if err == nil && f.events() == events {
		f.served.Add(1)
	}
	defer f.lastCall.Store(time.Now().UnixNano())
	for {
		old := f.maxLatency.Load()
		if lat <= old || f.maxLatency.CompareAndSwap(old, lat) {
			break
		}
	}
	if err != nil {
		f.lastFail.Store(time.Now().UnixNano())
		f.errs.Add(1)
		if !errors.Is(err, floodgate.ErrStoreUnavailable) {
			f.wrongErrs.Add(1)
		}
	}
}

// events counts the store's events so far.
func (f *faultStore) events() int64 {
	var n int64
	for i := range f.byOutcome {
		n += f.byOutcome[i].Load()
	}
	return n
}

// Redis killed (SIGKILL) under load: fail-open admits, fail-closed denies,
// fallback limits locally, fail-error returns ErrStoreUnavailable; every call
// returns within the timeout + 10ms; the stores go back to Redis within 1s of
// its restart on the same port; no goroutine is left behind.
func TestRedisKilledUnderLoad(t *testing.T) {
	baseline := runtime.NumGoroutine()
	proc, err := startRedis(0)
	require.NoError(t, err)
	defer proc.stop()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proc.addr}, DisableCache: true})
	require.NoError(t, err)
	lag := startLagProbe()
	defer lag.stop()

	var restarted atomic.Int64
	var killed atomic.Bool
	cfg := bucket.Config{Rate: floodgate.PerSecond(100), Burst: 10}
	const nodes = 4
	mk := func(name string, p FailurePolicy) *faultStore {
		f := &faultStore{name: name, restarted: &restarted, killed: &killed}
		f.store, err = New(c, WithPrefix(uniquePrefix(t)), WithFailurePolicy(p), WithObserver(f), WithName(name))
		require.NoError(t, err)
		f.lim, err = bucket.NewKeyed(f.store, cfg)
		require.NoError(t, err)
		return f
	}
	open := mk("open", FailOpen())
	closed := mk("closed", FailClosed(time.Second))
	fallback := mk("fallback", Fallback(newLocalStore(), nodes))
	plain := mk("error", FailError())
	all := []*faultStore{open, closed, fallback, plain}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, f := range all {
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					f.call(context.Background())
					time.Sleep(200 * time.Microsecond)
				}
			})
		}
	}
	time.Sleep(300 * time.Millisecond)
	for _, f := range all {
		require.Positive(t, f.served.Load(), "%s: no decision from Redis before the kill", f.name)
		require.Zero(t, f.early.Load(), "%s: store events while Redis decided: %v", f.name, f.earlyErr.Load())
	}

	killed.Store(true)
	proc.kill()
	time.Sleep(600 * time.Millisecond)
	fbAdmitted := fallback.admitted[floodgate.OutcomeFallback].Load()
	fallbackWindow := time.Since(time.Unix(0, fallback.firstFall.Load()))

	require.NoError(t, proc.restart())
	restarted.Store(time.Now().UnixNano())
	time.Sleep(1200 * time.Millisecond)
	stop()
	wg.Wait()

	lag.stop()
	for _, f := range all {
		lag.check(t, f.name, time.Duration(f.maxLatency.Load()), f.store.timeout+10*time.Millisecond)
		assert.Zero(t, f.badSource.Load(), "%s: events without Source SourceStore", f.name)
		rec := f.recovered()
		if assert.NotZero(t, rec, "%s: never went back to Redis", f.name) {
			back := time.Duration(rec - restarted.Load())
			assert.Less(t, back, time.Second, "%s: back to Redis after %v", f.name, back)
			t.Logf("%s: back to Redis %v after the restart", f.name, back.Round(time.Millisecond))
		}
	}
	assert.Positive(t, open.byOutcome[floodgate.OutcomeErrorOpen].Load())
	assert.Zero(t, open.badOpen.Load(), "fail-open denied")
	assert.Zero(t, open.errs.Load())
	assert.Positive(t, closed.byOutcome[floodgate.OutcomeErrorClosed].Load())
	assert.Zero(t, closed.badClosed.Load(), "fail-closed admitted")
	assert.Zero(t, closed.errs.Load())
	assert.Positive(t, plain.errs.Load(), "fail-error returned no error")
	assert.Zero(t, plain.wrongErrs.Load(), "errors must wrap ErrStoreUnavailable")

	// Fallback: 100/s over 4 nodes is 25/s locally, burst 2 (10/4),
	// drained at the switch: no burst.
	fbCalls := fallback.byOutcome[floodgate.OutcomeFallback].Load()
	localBound := 25*fallbackWindow.Seconds() + 1
	t.Logf("fallback: %d local decisions, %d admitted in %v (local bound %.0f)", fbCalls, fbAdmitted, fallbackWindow.Round(time.Millisecond), localBound)
	assert.Positive(t, fbAdmitted)
	assert.Less(t, fbAdmitted, fbCalls, "fallback admitted everything")
	assert.LessOrEqual(t, float64(fbAdmitted), localBound)
	assert.Zero(t, fallback.errs.Load())

	c.Close()
	requireNoGoroutineLeak(t, baseline)
}

// lagProbe measures how late the Go scheduler runs a goroutine that sleeps
// 1ms at a time: on a loaded machine (the CI box is shared) a call can come
// back late for reasons that are not the store's. The latency bound of the
// fault tests is timeout + 10ms + the worst lag seen while they ran.
type lagProbe struct {
	max  atomic.Int64
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func startLagProbe() *lagProbe {
	p := &lagProbe{done: make(chan struct{})}
	p.wg.Go(func() {
		for {
			start := time.Now()
			select {
			case <-p.done:
				return
			case <-time.After(time.Millisecond):
			}
			if late := int64(time.Since(start) - time.Millisecond); late > p.max.Load() {
				p.max.Store(late)
			}
		}
	})
	return p
}

func (p *lagProbe) stop() {
	p.once.Do(func() { close(p.done) })
	p.wg.Wait()
}

func (p *lagProbe) check(t *testing.T, name string, slowest, bound time.Duration) {
	t.Helper()
	lag := time.Duration(p.max.Load())
	t.Logf("%s: slowest call %v (bound %v + scheduler lag %v)", name, slowest.Round(100*time.Microsecond), bound, lag.Round(100*time.Microsecond))
	assert.LessOrEqual(t, slowest, bound+lag, "%s: slowest call", name)
}

func requireNoGoroutineLeak(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines, %d before the test:\n%s", runtime.NumGoroutine(), baseline, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The server loses the store's programs under load: SCRIPT FLUSH with
// EVALSHA (which then fails with NOSCRIPT: the script did not run, and
// rueidis falls back to EVAL), FUNCTION FLUSH with FCALL (which then fails
// with "Function not found": the store loads the library again and calls
// again). No error reaches the caller and no request is counted twice.
func TestScriptFlushUnderLoad(t *testing.T) {
	for name, c := range targets(t) {
		for _, mode := range []string{"functions", "scripts"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				opts := []Option{WithPrefix(uniquePrefix(t)), WithTimeout(5 * time.Second)}
				flush := func(n rueidis.Client) rueidis.Completed { return n.B().FunctionFlush().Build() }
				reload := "function|load"
				if mode == "scripts" {
					opts = append(opts, withEvalOnly())
					flush = func(n rueidis.Client) rueidis.Completed { return n.B().ScriptFlush().Build() }
					reload = "eval"
				}
				s, err := New(c, opts...)
				require.NoError(t, err)
				// A bucket that never refills during the test: admitted requests
				// and the remaining count must add up exactly.
				const burst = 100_000
				l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerHour(1), Burst: burst})
				require.NoError(t, err)
				reloadsBefore := commandCalls(t, c, reload)
				ctx, stop := context.WithCancel(context.Background())
				var admitted, errs atomic.Int64
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						for ctx.Err() == nil {
							d, err := l.Take(context.Background(), "k", 1)
							switch {
							case err != nil:
								errs.Add(1)
							case d.Allowed:
								admitted.Add(1)
							}
						}
					})
				}
				for range 10 {
					time.Sleep(30 * time.Millisecond)
					for _, node := range c.Nodes() {
						require.NoError(t, node.Do(context.Background(), flush(node)).Error())
					}
				}
				time.Sleep(30 * time.Millisecond)
				stop()
				wg.Wait()
				d, err := l.Peek(context.Background(), "k")
				require.NoError(t, err)
				assert.Zero(t, errs.Load(), "errors reached the caller")
				assert.Positive(t, admitted.Load())
				assert.Equal(t, int64(burst)-admitted.Load(), d.Remaining, "admitted %d", admitted.Load())
				assert.Greater(t, commandCalls(t, c, reload), reloadsBefore, "no reload happened: the test proved nothing")
				assert.Equal(t, mode == "scripts", s.onScripts())
			})
		}
	}
}

// evalCalls sums the EVAL calls the nodes of c have served.
func evalCalls(t *testing.T, c rueidis.Client) int64 { return commandCalls(t, c, "eval") }

// commandCalls sums the calls of command (lower case) that the nodes of c
// have served, from INFO commandstats, less the calls that failed (an
// FCALL of a function the server did not have yet, an EVALSHA answered
// NOSCRIPT).
func commandCalls(t *testing.T, c rueidis.Client, command string) int64 {
	var sum int64
	for _, node := range c.Nodes() {
		info, err := node.Do(context.Background(), node.B().Info().Section("commandstats").Build()).ToString()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":")
			if !ok {
				continue
			}
			for kv := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				if k != "calls" && k != "failed_calls" {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				if k == "calls" {
					sum += n
				} else {
					sum -= n
				}
			}
		}
	}
	return sum
}
