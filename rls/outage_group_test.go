package rls_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// outcomes records the outcomes an observer gets.
type outcomes struct {
	mu sync.Mutex
	o  []string
}

func (o *outcomes) Observe(e floodgate.Event) {
	o.mu.Lock()
	o.o = append(o.o, e.Outcome.String())
	o.mu.Unlock()
}

func (o *outcomes) since(n int) ([]string, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.o[n:]...), len(o.o)
}

// killable is a Redis store with failure policy fp on a redis-server of
// the test's own, which the test may kill.
func killable(t *testing.T, fp redisstore.FailurePolicy) (store.Store, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return redisStore(t, c, redisstore.WithFailurePolicy(fp), redisstore.WithTimeout(time.Second)), srv
}

// statusShape is what Envoy reads of one descriptor's status (whether
// units remain, not how many: the time of day changes that).
func statusShape(st *rlspb.RateLimitResponse_DescriptorStatus) string {
	return fmt.Sprintf("%v limit=%d remaining=%t reset=%t", st.Code, st.CurrentLimit.GetRequestsPerUnit(), st.LimitRemaining > 0, st.DurationUntilReset != nil)
}

// A request's descriptors are decided together (one group on the store,
// even for one descriptor) and answered in an outage as a single limiter
// (Store.Apply) answers, whatever the number of descriptors: for
// each failure policy of the store (the store's observer not fed to
// ObserveStore, as a library user may do), a real Redis is killed and the
// service is called through its gRPC API; the observer gets one event
// per (request, limit), each with the outcome a single descriptor gets.
func TestGroupOutageAnswersLikeSingle(t *testing.T) {
	files := map[string]string{"o.yaml": `
domain: o
descriptors:
  - key: a
    rate_limit: {unit: day, requests_per_unit: 7000}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 7000}
`}
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	// want is the answer a single limiter (Store.Apply) gives: the blanket
	// answers as the service's own fail modes, the fallback's with its
	// quota; each reported to the service's observer.
	policies := []struct {
		name     string
		fp       redisstore.FailurePolicy
		mode     middleware.FailMode
		want, ev string
	}{
		{"error", redisstore.FailError(), middleware.FailClosed, "OVER_LIMIT limit=7000 remaining=false reset=false", "[error_closed]"},
		{"open", redisstore.FailOpen(), middleware.FailClosed, "OK limit=0 remaining=false reset=false", "[error_open]"},
		{"closed", redisstore.FailClosed(2 * time.Second), middleware.FailOpen, "OVER_LIMIT limit=7000 remaining=false reset=false", "[error_closed]"},
		// The local window starts with its elapsed share taken: some left.
		{"fallback", redisstore.Fallback(mem, 1), middleware.FailClosed, "OK limit=7000 remaining=true reset=true", "[fallback]"},
	}
	for _, p := range policies {
		t.Run(p.name, func(t *testing.T) {
			st, srv := killable(t, p.fp)
			obs := &outcomes{}
			s := serve(t, st, files, rls.WithFailMode(p.mode), rls.WithObserver(obs), rls.WithHeaders(middleware.HeadersIETF|middleware.HeadersLegacy))
			srv.Kill()
			one := s.call(t, "o", 0, desc("a", "single"))
			evOne, n := obs.since(0)
			two := s.call(t, "o", 0, desc("a", "group"), desc("b", "group"))
			evTwo, _ := obs.since(n)
			if one.OverallCode != two.OverallCode || len(one.ResponseHeadersToAdd) != len(two.ResponseHeadersToAdd) {
				t.Errorf("overall %v with %d headers, want (as one descriptor) %v with %d", two.OverallCode, len(two.ResponseHeadersToAdd), one.OverallCode, len(one.ResponseHeadersToAdd))
			}
			for i, got := range two.Statuses {
				if statusShape(got) != statusShape(one.Statuses[0]) {
					t.Errorf("status %d: %s, want (as one descriptor) %s", i, statusShape(got), statusShape(one.Statuses[0]))
				}
			}
			// One event per (request, limit): each descriptor's as the
			// single one's.
			if fmt.Sprint(evTwo) != fmt.Sprint(append(slices.Clone(evOne), evOne...)) {
				t.Errorf("observer: %v, want (each limit as one descriptor) %v twice", evTwo, evOne)
			}
			if got := statusShape(one.Statuses[0]); got != p.want || fmt.Sprint(evOne) != p.ev {
				t.Errorf("one descriptor: %s, observer %v; want %s, %s", got, evOne, p.want, p.ev)
			}
		})
	}
}
