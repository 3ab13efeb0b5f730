package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// FailOpen and FailClosed answer as their docs say, for a single decision
// and for a group (ApplyAll through TakeAll) alike: Fallback set, Limit 0,
// no quota advertised. No Redis: the store dials a closed port.
func TestBlanketFailureAnswersLimitZero(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		policy redisstore.FailurePolicy
		want   floodgate.Decision
	}{
		{"open", redisstore.FailOpen(), floodgate.Decision{Allowed: true, Fallback: true}},
		{"closed", redisstore.FailClosed(2 * time.Second), floodgate.Decision{Fallback: true, RetryAfter: 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := redisstore.Dial(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1"}, DisableCache: true},
				redisstore.WithFailurePolicy(tc.policy), redisstore.WithTimeout(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			a, err := bucket.NewKeyed(st, bucket.Config{Name: "a", Rate: floodgate.PerSecond(10), Burst: 20})
			if err != nil {
				t.Fatal(err)
			}
			b, err := bucket.NewKeyed(st, bucket.Config{Name: "b", Rate: floodgate.PerSecond(5), Burst: 5})
			if err != nil {
				t.Fatal(err)
			}
			if d, err := a.Take(ctx, "k", 1); err != nil || d != tc.want {
				t.Errorf("single: %+v, %v; want %+v", d, err, tc.want)
			}
			if d, err := floodgate.TakeAll(ctx, []floodgate.Check{{Limiter: a, Key: "k", N: 1}, {Limiter: b, Key: "k", N: 1}}); err != nil || d != tc.want {
				t.Errorf("group: %+v, %v; want %+v", d, err, tc.want)
			}
		})
	}
}
