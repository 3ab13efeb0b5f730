package grpclimit

import (
	"context"
	"fmt"
	"github.com/floodgate-go/floodgate/middleware"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// Group decisions in an outage answer as a single limiter does over a real
// gRPC listener: for each failure policy of the store, a real Redis is
// killed and one limiter, floodgate.All and WithLimit each get one call:
// same status code, retry delay (in whole seconds), pushback trailer and
// request outcome. Fallback's local limit starts drained: a refusal.
func TestGroupOutageAnswersLikeSingle(t *testing.T) {
	failures := []struct {
		name string
		fp   func(t *testing.T) redisstore.FailurePolicy
		want string // what a single limiter gives
	}{
		{"error", func(*testing.T) redisstore.FailurePolicy { return redisstore.FailError() }, "Unavailable retry=1s pushback=true error_closed"},
		{"open", func(*testing.T) redisstore.FailurePolicy { return redisstore.FailOpen() }, "OK retry=0s pushback=false error_open"},
		{"closed", func(*testing.T) redisstore.FailurePolicy { return redisstore.FailClosed(2 * time.Second) }, "Unavailable retry=1s pushback=true error_closed"},
		{"fallback", func(t *testing.T) redisstore.FailurePolicy { return redisstore.Fallback(newStore(t), 1) }, "ResourceExhausted retry=1s pushback=true fallback"},
	}
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			rs, err := redisstore.New(c, redisstore.WithFailurePolicy(f.fp(t)), redisstore.WithTimeout(time.Second))
			require.NoError(t, err)
			a, err := bucket.NewKeyed(rs, bucket.Config{Rate: floodgate.PerSecond(7), Burst: 7})
			require.NoError(t, err)
			b, err := bucket.NewKeyed(rs, bucket.Config{Rate: floodgate.PerSecond(7), Burst: 7})
			require.NoError(t, err)
			both, err := floodgate.All(a, b)
			require.NoError(t, err)
			key := func(context.Context, string) string { return "k" }
			mechanisms := []struct {
				name string
				l    floodgate.Limiter
				opts []Option
			}{
				{"single", a, nil},
				{"All", both, nil},
				{"WithLimit", a, []Option{WithLimit(b, key)}},
			}
			srv.Kill()
			for _, m := range mechanisms {
				obs := &events{}
				ic, err := New(m.l, append([]Option{WithKeyFunc(key), WithFailMode(middleware.FailClosed), WithObserver(obs)}, m.opts...)...)
				require.NoError(t, err)
				conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
				var trailer metadata.MD
				_, err = healthpb.NewHealthClient(conn).Check(testCtx(t), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
				retry, _ := RetryDelay(err)
				got := fmt.Sprintf("%v retry=%ds pushback=%t", status.Code(err), (retry+time.Second-1)/time.Second, len(trailer.Get(pushbackTrailer)) == 1)
				// One event per (call, limit), each with the call's
				// outcome: the limits failed together.
				evs := obs.all()
				if len(evs) != 1+len(m.opts) {
					got += fmt.Sprintf(" %d events", len(evs))
				} else {
					got += " " + evs[0].Outcome.String()
				}
				for i, ev := range evs {
					if ev.Outcome != evs[0].Outcome {
						t.Errorf("%s under %s: event %d %s, event 0 %s", m.name, f.name, i, ev.Outcome, evs[0].Outcome)
					}
				}
				if got != f.want {
					t.Errorf("%s under %s: %s, want (as a single limiter) %s", m.name, f.name, got, f.want)
				}
			}
		})
	}
}
