package policy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/livetest"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// The live-change scenarios on memstore, through the API, a file
// reload and a watched file.
func TestLiveChangesOnMemstore(t *testing.T) {
	for _, ap := range livetest.Appliers() {
		t.Run(ap.Name, func(t *testing.T) {
			t.Run("RaiseThenLower", func(t *testing.T) {
				s, clk := clocked(t)
				livetest.RaiseThenLower(t, livetest.Env{Store: s, Advance: clk.Advance}, ap)
			})
			t.Run("KeepsTokens", func(t *testing.T) {
				s, clk := clocked(t)
				livetest.KeepsTokens(t, livetest.Env{Store: s, Advance: clk.Advance}, ap)
			})
		})
	}
	t.Run("RaiseInGroup", func(t *testing.T) {
		s, clk := clocked(t)
		livetest.RaiseInGroup(t, livetest.Env{Store: s, Advance: clk.Advance})
	})
}

// Random takes and config changes never admit more than the versions that
// ran allow, in every algorithm family, on memstore.
func TestLiveChangesBoundedOnMemstore(t *testing.T) {
	for _, f := range livetest.Families() {
		t.Run(f.Name, func(t *testing.T) {
			for seed := range uint64(12) {
				s, clk := clocked(t)
				livetest.Bounded(t, livetest.Env{Store: s, Advance: clk.Advance}, func() int64 { return clk.Now().UnixMicro() }, f, seed)
			}
		})
	}
}

// predecessors is how many earlier versions the running limiter of name
// reads through on a miss: its limit's versions but its own.
func predecessors(t *testing.T, live *policy.Live, name string) int {
	t.Helper()
	lim, ok := live.Set().Limiter(name)
	require.True(t, ok)
	lg, ok := lim.Algorithm().(algo.Lineage)
	require.True(t, ok)
	vs := lg.Versions().Load()
	require.NotEmpty(t, vs)
	require.Equal(t, algo.MemoryNamespace(lg), algo.MemoryNamespace(vs[0]), "the running version is the newest")
	return len(vs) - 1
}

// A limiter whose parameters did not change is the same limiter; one that
// changed reads the earlier version through until every state it left is
// full (FullWithin later), then no more, and keeps its keys.
func TestLiveLineage(t *testing.T) {
	s, clk := clocked(t)
	live, err := policy.NewLive(parse(t, livetest.Pro(100)), s)
	require.NoError(t, err)
	wall := time.Unix(1_800_000_000, 0)
	policy.SetClock(live, func() time.Time { return wall })
	lim0, _ := live.Set().Limiter("pro")
	_, err = live.Update(parse(t, livetest.Pro(100)+"  - {name: free, rate: 1/s}\n"), "api")
	require.NoError(t, err)
	lim1, _ := live.Set().Limiter("pro")
	assert.Same(t, lim0, lim1, "an unchanged policy keeps its limiter")
	assert.Equal(t, 0, predecessors(t, live, "pro"))

	ctx := context.Background()
	for range 60 {
		_, err := live.Take(ctx, "k", 1)
		require.NoError(t, err)
	}
	_, err = live.Update(parse(t, livetest.Pro(200)), "api")
	require.NoError(t, err)
	assert.Equal(t, 1, predecessors(t, live, "pro"))
	lim2, _ := live.Set().Limiter("pro")
	d, err := lim2.Peek(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, int64(40), d.Remaining, "read through the earlier version")

	// Not yet expired: the retire keeps it.
	policy.Retire(live)
	assert.Equal(t, 1, predecessors(t, live, "pro"))
	// A token bucket's states are full within its burst plus the
	// reservation horizon (15 minutes).
	wall = wall.Add(15*time.Minute + 2*time.Second)
	policy.Retire(live)
	assert.Equal(t, 0, predecessors(t, live, "pro"), "expired versions are not read through")
	clk.Advance(time.Millisecond)
	lim3, _ := live.Set().Limiter("pro")
	d, err = lim3.Peek(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, int64(40), d.Remaining, "the version keeps its namespace: the moved key is still there")
	assert.Equal(t, uint64(3), live.Version(), "retiring is not a config change")
}

// More changes within the time to full than the versions a Live reads
// through: the oldest is dropped, and the change says so.
func TestLiveLineageBound(t *testing.T) {
	s, _ := clocked(t)
	live, err := policy.NewLive(parse(t, livetest.Pro(1)), s)
	require.NoError(t, err)
	var dropped []string
	for i := 2; i <= algo.MaxPredecessors+2; i++ {
		ch, err := live.Update(parse(t, livetest.Pro(i)), "api")
		require.NoError(t, err)
		assert.LessOrEqual(t, predecessors(t, live, "pro"), algo.MaxPredecessors)
		dropped = append(dropped, ch.Dropped...)
	}
	assert.Equal(t, []string{"pro"}, dropped, "one version past the bound")
	assert.Equal(t, algo.MaxPredecessors, predecessors(t, live, "pro"))
}

// The Live's own timer retires a version once its states are all full
// (here a 50 ms fixed window: full within 50 ms).
func TestLiveLineageTimer(t *testing.T) {
	s, _ := clocked(t)
	win := func(limit int) string {
		return fmt.Sprintf("default_plan: w\npolicies:\n  - {name: w, algorithm: fixed-window, limit: %d, window: 50ms}\n", limit)
	}
	live, err := policy.NewLive(parse(t, win(10)), s)
	require.NoError(t, err)
	_, err = live.Update(parse(t, win(20)), "api")
	require.NoError(t, err)
	require.Equal(t, 1, predecessors(t, live, "w"))
	require.Eventually(t, func() bool { return predecessors(t, live, "w") == 0 }, 5*time.Second, 5*time.Millisecond)
}

func parse(t *testing.T, text string) policy.Config {
	t.Helper()
	cfg, err := policy.Parse("limits.yaml", []byte(text))
	require.NoError(t, err)
	return cfg
}

// Credentials on a shared store need the fleet's secret: a random one per
// process would give each node its own budget per credential. Policies
// without credentials run without it.
func TestSharedStoreNeedsTheSecret(t *testing.T) {
	cfg, err := policy.Parse("plans.yaml", []byte(plansYAML))
	require.NoError(t, err)
	s, _ := clocked(t)
	ctx := context.Background()
	cred := []middleware.Descriptor{{{Key: "api_key", Value: "key_acme", Credential: true}}}
	plain := []middleware.Descriptor{{{Key: "api_key", Value: "key_acme"}}}

	live, err := policy.NewLive(cfg, sharedStore{s})
	require.NoError(t, err, "no credential yet: nothing to refuse")
	require.ErrorIs(t, live.CheckCredentials(), floodgate.ErrInvalidConfig)
	assert.Contains(t, live.CheckCredentials().Error(), "WithKeySecret")
	_, _, err = live.Match(ctx, cred, 1, nil)
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "a credential entry is refused")
	checks, _, err := live.Match(ctx, plain, 1, nil)
	require.NoError(t, err)
	require.Len(t, checks, 1)

	live, err = policy.NewLive(cfg, sharedStore{s}, policy.WithKeySecret([]byte("sixteen bytes at least")))
	require.NoError(t, err)
	require.NoError(t, live.CheckCredentials())
	checks, _, err = live.Match(ctx, cred, 1, nil)
	require.NoError(t, err)
	require.Len(t, checks, 1)
	assert.NotContains(t, checks[0].Key, "key_acme", "hashed")

	live, err = policy.NewLive(cfg, s)
	require.NoError(t, err)
	require.NoError(t, live.CheckCredentials(), "a store of the process's own draws its secret")

}

type sharedStore struct{ store.Store }

func (sharedStore) Shared() bool { return true }
