package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/window"
)

// TestDenialWritesNothing checks that a denial, which leaves the state as
// it was, does not write the key again, through each script that steps a
// stored state: the one-word script, the group script (multi-word states)
// and the batch script. Once the key denies, the test moves its TTL far
// out; a rewrite would bring it back to the time to full.
func TestDenialWritesNothing(t *testing.T) {
	c := newClient(t, singleAddr)
	ctx := context.Background()
	tb, err := bucket.Config{Rate: floodgate.PerMinute(1), Burst: 1}.Algorithm()
	require.NoError(t, err)
	lk, err := leaky.Config{Rate: floodgate.PerMinute(1), Burst: 1, NoDelay: true}.Algorithm()
	require.NoError(t, err)
	fw, err := window.Config{Limit: 1, Window: time.Hour}.FixedAlgorithm()
	require.NoError(t, err)
	direct := testStore(t, c, WithCoalescing(0))
	batched := testStore(t, c, WithCoalescing(1))
	const far = 10 * time.Hour
	for _, tc := range []struct {
		name  string
		s     *Store
		alg   algo.Algorithm
		batch bool
	}{
		{"one-word", direct, tb, false},
		{"group-leaky", direct, lk, false},
		{"group-window", direct, fw, false},
		{"batch", batched, tb, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "unchanged-" + tc.name
			take := func() floodgate.Decision {
				t.Helper()
				if !tc.batch {
					d, err := tc.s.Apply(ctx, key, tc.alg, 1)
					require.NoError(t, err)
					return d
				}
				p, err := tc.s.prepare(tc.alg)
				require.NoError(t, err)
				cl := &call{key: key, n: 1, done: make(chan struct{}, 1)}
				p.co.runBatch([]*call{cl})
				require.NoError(t, cl.err)
				return cl.d
			}
			rk := tc.s.keyOf(key, tc.alg)
			require.True(t, take().Allowed)
			for i := 0; take().Allowed; i++ { // drain what the burst leaves
				require.Less(t, i, 5, "no denial")
			}
			before, err := c.Do(ctx, c.B().Get().Key(rk).Build()).ToString()
			require.NoError(t, err)
			ttl, err := c.Do(ctx, c.B().Pttl().Key(rk).Build()).AsInt64()
			require.NoError(t, err)
			require.Greater(t, ttl, int64(0))
			require.Less(t, ttl, far.Milliseconds()/2, "the admitted take's TTL is its time to full")
			require.NoError(t, c.Do(ctx, c.B().Pexpire().Key(rk).Milliseconds(far.Milliseconds()).Build()).Error())

			for range 3 {
				d := take()
				require.False(t, d.Allowed)
				assert.Greater(t, d.RetryAfter, time.Duration(0))
			}
			after, err := c.Do(ctx, c.B().Get().Key(rk).Build()).ToString()
			require.NoError(t, err)
			assert.Equal(t, before, after, "a denial changed the value")
			ttl, err = c.Do(ctx, c.B().Pttl().Key(rk).Build()).AsInt64()
			require.NoError(t, err)
			assert.Greater(t, ttl, far.Milliseconds()/2, "a denial wrote the key again (its TTL is back to the time to full)")
		})
	}
}
