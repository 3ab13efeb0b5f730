package httplimit

import (
	"context"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/middleware"
)

// undescribed is a limiter that says nothing of its policy: its
// RateLimit-Policy member takes q from each decision's Limit.
type undescribed struct{ floodgate.Limiter }

func (u undescribed) Take(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	return u.Limiter.Take(ctx, key, n)
}

// TestOneLimitHeadersMatchGeneral checks the one-limit path (writeOne)
// against the general header writer, the oracle, on random verdicts: the
// same fields with the same bytes, whatever the decision's numbers (limits
// other than the capacity, beyond 15 digits, negative; refusals, shaping
// delays), the header groups and the limiter (described, or not).
func TestOneLimitHeadersMatchGeneral(t *testing.T) {
	described := newMemBucket(t, frozen(), floodgate.PerSecond(10), 20)
	limiters := map[string]floodgate.Limiter{"described": described, "undescribed": undescribed{described}}
	groups := map[string]middleware.HeaderSet{"ietf": middleware.HeadersIETF, "legacy": middleware.HeadersLegacy, "both": middleware.HeadersIETF | middleware.HeadersLegacy}
	rng := rand.New(rand.NewPCG(25, 2026))
	pick := func(xs ...int64) int64 { return xs[rng.IntN(len(xs))] }
	dur := func() time.Duration {
		return time.Duration(pick(0, -1, 1, int64(time.Millisecond), int64(time.Second), int64(1500*time.Millisecond), 1<<62))
	}
	var fast, general int
	for lname, l := range limiters {
		for gname, g := range groups {
			opts := []Option{WithHeaders(g)}
			if lname == "described" && rng.IntN(2) == 0 {
				opts = append(opts, WithPolicy(floodgate.Description{Name: `api "v2"`}))
			}
			m := mustMW(t, l, opts...)(http.NotFoundHandler()).(*limitHandler).m
			for range 2000 {
				d := floodgate.Decision{
					Allowed:    rng.IntN(3) > 0,
					Limit:      pick(20, 19, 21, 0, -5, maxSF, maxSF+1, 1<<62),
					Remaining:  pick(0, 1, 7, 19, 20, 25, -3, maxSF+7),
					ResetAfter: dur(),
					RetryAfter: dur(),
					Delay:      dur(),
				}
				v := admit.Verdict{Kind: admit.Admit, Decision: d, Headers: true}
				if rng.IntN(2) == 0 {
					v.Kind, v.RetryAfter = admit.Deny, dur()
					v.Reason = admit.ReasonRateLimited
					if rng.IntN(3) == 0 {
						v.Reason = admit.ReasonDelay
					}
				}
				checks := []floodgate.Check{{Limiter: l, Decision: d}}
				want, got := http.Header{}, http.Header{}
				if rng.IntN(2) == 0 { // a field the handler's outer layers set
					want["Content-Type"], got["Content-Type"] = []string{"text/plain"}, []string{"text/plain"}
				}
				m.cfg.writeHeaders(m, want, checks, &v, "ip")
				m.writeHeaders(got, checks, &v, "ip")
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s limiter, %s headers, verdict %+v:\n got %q\nwant %q", lname, gname, v, got, want)
				}
				fast++
			}
		}
	}
	// Stacked middlewares and diagnostic fields take the general path.
	m := mustMW(t, described, WithHeaders(middleware.HeadersIETF|middleware.HeadersLegacy|middleware.HeadersDiagnostic))(http.NotFoundHandler()).(*limitHandler).m
	d := floodgate.Decision{Allowed: true, Limit: 20, Remaining: 4, ResetAfter: 2 * time.Second}
	v := admit.Verdict{Kind: admit.Admit, Decision: d, Headers: true}
	checks := []floodgate.Check{{Limiter: described, Decision: d}}
	for _, pre := range []http.Header{{}, {hRateLimit: {`"outer";r=1;t=1`}, hRateLimitPolicy: {`"outer";q=5;w=1`}, hRemaining: {"1"}}} {
		want, got := pre.Clone(), pre.Clone()
		m.cfg.writeHeaders(m, want, checks, &v, "ip")
		m.writeHeaders(got, checks, &v, "ip")
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("diagnostic headers over %q:\n got %q\nwant %q", pre, got, want)
		}
		general++
	}
	t.Logf("%d one-limit verdicts, %d general ones, identical", fast, general)
}
