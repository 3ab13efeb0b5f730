package shadow_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// A dry-run policy behind httplimit.Policies, through a real server and
// client: every request passes, and the recording sees each one, with the
// would-be refusals, and the API key only as its keyed hash.
func TestDryRunPolicyThroughHTTP(t *testing.T) {
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: time.Second})
	require.NoError(t, err)
	defer rec.Close()
	mem, err := memstore.New(memstore.WithClock(clk))
	require.NoError(t, err)
	defer mem.Close()
	s, err := rec.Store(mem)
	require.NoError(t, err)
	live, err := policy.NewLive(policy.Config{
		Domain:   "api",
		Policies: []policy.Policy{{Name: "per-key", Rate: floodgate.PerSecond(5), DryRun: true}},
		Rules:    []policy.Rule{{Key: "api_key", Policy: "per-key"}},
	}, s)
	require.NoError(t, err)
	limit, err := httplimit.Policies(live, httplimit.WithDescriptor(httplimit.HeaderEntry("X-API-Key", "api_key")))
	require.NoError(t, err)
	srv := httptest.NewServer(limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })))
	defer srv.Close()

	send := func(key string, n int) {
		for range n {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/img", nil)
			req.Header.Set("X-API-Key", key)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			assert.Equal(t, http.StatusOK, res.StatusCode, "dry run never refuses")
		}
	}
	send("secret-key-A", 20)
	send("secret-key-B", 3)
	clk.Advance(2 * time.Second)

	d, ok := rec.Demand("per-key")
	require.True(t, ok)
	rep := d.Report()
	assert.EqualValues(t, 23, rep.Decisions)
	assert.EqualValues(t, 15, rep.Refused, "key A's requests beyond the burst of 5")
	assert.Equal(t, 20.0, rep.Demand.Max)
	require.Len(t, rep.Top, 2)
	assert.EqualValues(t, 20, rep.Top[0].Peak)
	assert.EqualValues(t, 15, rep.Top[0].Refused)
	for _, k := range rep.Top {
		assert.False(t, strings.Contains(k.Key, "secret"), "credential in clear: %q", k.Key)
	}
	assert.True(t, rep.Recommendation.OK)
}
