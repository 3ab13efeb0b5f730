package promobserver

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// A store bounded to 3 keys in one shard: the gauges follow its keys, and
// a fourth key's eviction shows in the counter.
func TestRegisterMemStore(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(func() time.Time { return now })),
		memstore.WithShards(1), memstore.WithMaxKeys(3))
	require.NoError(t, err)
	defer s.Close()
	reg := prometheus.NewRegistry()
	require.NoError(t, RegisterMemStore(reg, "local", s))
	lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 10})
	require.NoError(t, err)

	metrics := func(keys, evictions int) string {
		return strings.NewReplacer("KEYS", strconv.Itoa(keys), "EVICTIONS", strconv.Itoa(evictions)).Replace(`
# HELP floodgate_memstore_evictions_total Keys a memory store dropped at its bound before their state was full (they restarted from full capacity).
# TYPE floodgate_memstore_evictions_total counter
floodgate_memstore_evictions_total{store="local"} EVICTIONS
# HELP floodgate_memstore_keys Keys a memory store holds.
# TYPE floodgate_memstore_keys gauge
floodgate_memstore_keys{store="local"} KEYS
# HELP floodgate_memstore_max_keys The bound on the keys of a memory store.
# TYPE floodgate_memstore_max_keys gauge
floodgate_memstore_max_keys{store="local"} 3
`)
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(metrics(0, 0))))
	for _, k := range []string{"a", "b", "c"} {
		_, err := lim.Take(context.Background(), k, 5)
		require.NoError(t, err)
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(metrics(3, 0))))
	_, err = lim.Take(context.Background(), "d", 5)
	require.NoError(t, err)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(metrics(3, 1))))
	require.Empty(t, lint(t, reg))

	// A second store under another name registers beside it; the same
	// name again is refused, and so are nil arguments.
	s2, err := memstore.New()
	require.NoError(t, err)
	defer s2.Close()
	require.NoError(t, RegisterMemStore(reg, "other", s2))
	require.Error(t, RegisterMemStore(reg, "local", s2))
	require.True(t, errors.Is(RegisterMemStore(nil, "x", s2), floodgate.ErrInvalidConfig))
	require.True(t, errors.Is(RegisterMemStore(reg, "x", nil), floodgate.ErrInvalidConfig))
}
