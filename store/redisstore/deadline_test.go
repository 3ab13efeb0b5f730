package redisstore

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
)

// deadlineRig is a store on a server of its own (DEBUG allowed) whose calls
// show or hide their deadline to rueidis, with a second client that stalls
// the server, and a count of the store client's connection attempts.
type deadlineRig struct {
	proc  *redisProc
	s     *Store
	l     *store.Limiter
	other rueidis.Client
	dials atomic.Int64
}

func newDeadlineRig(tb testing.TB, show bool, timeout time.Duration) *deadlineRig {
	tb.Helper()
	r := &deadlineRig{}
	var err error
	r.proc, err = startRedis(0, "--enable-debug-command", "yes")
	require.NoError(tb, err)
	tb.Cleanup(r.proc.stop)
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{r.proc.addr},
		DisableCache: true,
		// One connection: rueidis spreads keyed commands over its
		// connections at random, and the test follows one.
		PipelineMultiplex: -1,
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			r.dials.Add(1)
			return d.DialContext(ctx, "tcp", dst)
		},
	})
	require.NoError(tb, err)
	tb.Cleanup(c.Close)
	r.other = newClient(tb, r.proc.addr)
	r.s, err = New(c, WithPrefix(uniquePrefix(tb)), WithTimeout(timeout), WithCoalescing(0))
	require.NoError(tb, err)
	r.s.dl.show = show
	r.l, err = bucket.NewKeyed(r.s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	require.NoError(tb, err)
	// Connected, library loaded: the first call takes up to three round
	// trips (FCALL, FUNCTION LOAD, FCALL), which a loaded machine may not
	// fit in a short timeout.
	for range 5 {
		if _, err = r.l.Take(context.Background(), "k", 1); err == nil {
			break
		}
	}
	require.NoError(tb, err)
	return r
}

// timeOut makes one lone call time out: the server sleeps (DEBUG SLEEP on
// the other client) longer than the store's timeout. It returns once the
// server is awake again, with the store's breaker closed again (the lone
// call timed out with nothing answered: a stall, which opened it; the rig
// times rueidis' connection, not the breaker). On a loaded machine the
// call may reach the server before it sleeps: it tries again, a few times.
func (r *deadlineRig) timeOut(tb testing.TB, sleep time.Duration) {
	tb.Helper()
	for range 5 {
		done := make(chan error, 1)
		go func() {
			done <- r.other.Do(context.Background(), r.other.B().Arbitrary("DEBUG", "SLEEP").Args(strconv.FormatFloat(sleep.Seconds(), 'f', -1, 64)).Build()).Error()
		}()
		time.Sleep(sleep / 2) // the server is asleep
		_, err := r.l.Take(context.Background(), "k", 1)
		require.NoError(tb, <-done)
		if err != nil {
			r.s.brk.answer()
			return
		}
	}
	tb.Fatal("no call timed out")
}

// The branch of rueidis' pipe that deadline.go steers, pinned to the
// rueidis of go.mod: a lone call whose context shows a deadline runs
// synchronously with a connection deadline, and when it times out rueidis
// closes the connection, so the next call dials again; with the deadline
// hidden (the store's default), the call waits on Done in the queue and the
// connection survives the timeout. When this test fails on the shown side,
// rueidis changed that branch and deadline.go buys nothing any more.
func TestRueidisDeadlineBranch(t *testing.T) {
	t.Logf("rueidis %s (go.mod)", rueidisVersion(t))
	for _, show := range []bool{false, true} {
		r := newDeadlineRig(t, show, 20*time.Millisecond)
		before := r.dials.Load()
		r.timeOut(t, 100*time.Millisecond)
		_, err := r.l.Take(context.Background(), "k", 1)
		require.NoError(t, err)
		redials := r.dials.Load() - before
		if show {
			require.Equal(t, int64(1), redials, "shown deadline: rueidis no longer closes the connection of a lone call that timed out; deadline.go is not needed any more")
		} else {
			require.Zero(t, redials, "hidden deadline: the connection did not survive the timeout")
		}
	}
}

// rueidisVersion returns the version of rueidis that go.mod requires.
func rueidisVersion(t *testing.T) string {
	mod, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`github.com/redis/rueidis (v\S+)`).FindSubmatch(mod)
	require.NotNil(t, m, "rueidis not in go.mod")
	return string(m[1])
}

// BenchmarkDeadline compares the store's calls with the deadline hidden
// from rueidis (the default) and shown:
//
//   - serial: lone decisions, one after the other (shown: rueidis runs
//     them synchronously; hidden: through its background writer and
//     reader);
//   - after-timeout: each op makes one decision time out (a 30ms server
//     stall against a 10ms timeout), waits for the server, and times the
//     next decision (metric next-µs, and next-failed/op when it failed
//     too): shown, rueidis has closed the connection and the next decision
//     dials again (metric dials/op).
//
// Interleave the variants across runs to compare them under the same load:
//
//	go test -c -o /tmp/rs.test ./store/redisstore
//	for i in 1 2 3 4 5 6; do /tmp/rs.test -test.run '^$' -test.bench 'BenchmarkDeadline' -test.count 1; done
func BenchmarkDeadline(b *testing.B) {
	for _, show := range []bool{false, true} {
		name := map[bool]string{false: "hidden", true: "shown"}[show]
		b.Run("serial/"+name, func(b *testing.B) {
			r := newDeadlineRig(b, show, time.Second)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.l.Take(ctx, "k", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("after-timeout/"+name, func(b *testing.B) {
			r := newDeadlineRig(b, show, 10*time.Millisecond)
			ctx := context.Background()
			d0 := r.dials.Load()
			var next time.Duration
			failed := 0
			for b.Loop() {
				r.timeOut(b, 30*time.Millisecond)
				start := time.Now()
				if _, err := r.l.Take(ctx, "k", 1); err != nil {
					failed++
				}
				next += time.Since(start)
			}
			b.ReportMetric(float64(next.Microseconds())/float64(b.N), "next-µs")
			b.ReportMetric(float64(failed)/float64(b.N), "next-failed/op")
			b.ReportMetric(float64(r.dials.Load()-d0)/float64(b.N), "dials/op")
		})
	}
}
