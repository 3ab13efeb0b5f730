package grpclimit

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// newBucket returns a keyed token bucket on a fresh memstore (no background
// sweeper; opts add to that).
func newBucket(t testing.TB, r floodgate.Rate, burst int64, opts ...memstore.Option) *store.Limiter {
	t.Helper()
	s, err := memstore.New(append([]memstore.Option{memstore.WithSweepInterval(0)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: r, Burst: burst})
	require.NoError(t, err)
	return l
}

// newStore returns a fresh memstore without sweeper, closed at the end.
func newStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// namedBucket returns a keyed token bucket named name on s.
func namedBucket(t testing.TB, s *memstore.Store, name string, r floodgate.Rate, burst int64) *store.Limiter {
	t.Helper()
	l, err := bucket.NewKeyed(s, bucket.Config{Name: name, Rate: r, Burst: burst})
	require.NoError(t, err)
	return l
}

// take is one recorded call to a limiter.
type take struct {
	at       time.Time
	key      string
	n        int
	decision floodgate.Decision
	err      error
}

// recLimiter records every Take of the limiter it wraps.
type recLimiter struct {
	l     floodgate.Limiter
	mu    sync.Mutex
	takes []take
}

func (r *recLimiter) Take(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	at := time.Now()
	d, err := r.l.Take(ctx, key, n)
	r.mu.Lock()
	r.takes = append(r.takes, take{at: at, key: key, n: n, decision: d, err: err})
	r.mu.Unlock()
	return d, err
}

func (r *recLimiter) all() []take {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]take(nil), r.takes...)
}

// events records what an observer receives.
type events struct {
	mu sync.Mutex
	ev []floodgate.Event
}

func (e *events) Observe(ev floodgate.Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *events) all() []floodgate.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]floodgate.Event(nil), e.ev...)
}

func (e *events) count(o floodgate.Outcome) int {
	n := 0
	for _, ev := range e.all() {
		if ev.Outcome == o {
			n++
		}
	}
	return n
}

// serve starts a real gRPC server with the health service on a 127.0.0.1
// listener and returns a client connection to it. Both are closed when the
// test ends.
func serve(t testing.TB, srvOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) (*grpc.ClientConn, *health.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(srvOpts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	dialOpts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)
	conn, err := grpc.NewClient(lis.Addr().String(), dialOpts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-done
	})
	return conn, hs
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// peerCtx returns a context whose gRPC peer has the TCP address addr.
func peerCtx(t testing.TB, addr string) context.Context {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", addr)
	require.NoError(t, err)
	return peer.NewContext(context.Background(), &peer.Peer{Addr: a})
}

// refusedThenRetried drains the peer's bucket b, then makes call at once, and
// returns the two takes that call caused: a refusal and the admitted retry.
// On a machine so loaded that the bucket refilled in between, the first
// attempt is admitted and proves nothing: it tries again, a few times.
func refusedThenRetried(t *testing.T, b floodgate.Limiter, rec *recLimiter, call func() error) (first, retry take) {
	t.Helper()
	for try := 0; try < 5; try++ {
		for {
			d, err := b.Take(context.Background(), "127.0.0.1", 1)
			require.NoError(t, err)
			if !d.Allowed {
				break
			}
		}
		before := len(rec.all())
		require.NoError(t, call(), "the retry after the pushback is admitted")
		takes := rec.all()[before:]
		if takes[0].decision.Allowed {
			continue
		}
		require.Len(t, takes, 2, "one refusal, one admitted retry")
		return takes[0], takes[1]
	}
	t.Fatal("could not get a refused first attempt")
	return take{}, take{}
}

// assertWaitedPushback checks that retry reached the server no earlier than
// the pushback the first attempt's refusal carried.
func assertWaitedPushback(t *testing.T, first, retry take) {
	t.Helper()
	pushback := time.Duration(pushbackMillis(first.decision.RetryAfter)) * time.Millisecond
	gap := retry.at.Sub(first.at)
	t.Logf("pushback %v, retry came %v later", pushback, gap)
	assert.Positive(t, pushback)
	assert.GreaterOrEqual(t, gap, pushback, "the client waited at least the pushback")
	assert.True(t, retry.decision.Allowed)
}
