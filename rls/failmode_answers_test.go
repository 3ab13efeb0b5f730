package rls_test

import (
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// With Redis away, FailOpen answers OK with nothing that makes a client
// wait, and FailClosed OVER_LIMIT with the limit but no reset, shadow-mode
// descriptors OK; neither adds rate-limit headers.
func TestFailureModeAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens there
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if c == nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st, err := redisstore.New(c, redisstore.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"f.yaml": `
domain: f
descriptors:
  - key: enforced
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`}
	for _, mode := range []middleware.FailMode{middleware.FailOpen, middleware.FailClosed} {
		srv := serve(t, st, files, rls.WithFailMode(mode), rls.WithHeaders(middleware.HeadersIETF|middleware.HeadersLegacy))
		r := srv.call(t, "f", 0, desc("enforced", "x"), desc("shadowed", "x"))
		if len(r.ResponseHeadersToAdd) != 0 {
			t.Errorf("%v: headers %v", mode, r.ResponseHeadersToAdd)
		}
		for i, s := range r.Statuses {
			if s.DurationUntilReset != nil || s.LimitRemaining != 0 {
				t.Errorf("%v: status %d %v tells a reset or units left", mode, i, s)
			}
		}
		if mode == middleware.FailOpen {
			want(t, r, ok, "OK -", "OK -")
		} else {
			want(t, r, over, "OVER", "OK -")
			if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
				t.Errorf("closed: %v, want the limit", r.Statuses[0])
			}
		}
	}
}
