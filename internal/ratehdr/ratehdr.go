// Package ratehdr decides what the IETF RateLimit-Policy and RateLimit
// fields (draft-ietf-httpapi-ratelimit-headers) say of a limit, once for
// every transport (httplimit, the Envoy rate limit service), so that they
// advertise the same numbers:
//
//   - q and w (RateLimit-Policy) state the limit's rate, q units per w
//     whole seconds, with q at least the limit's capacity: a token bucket
//     of 10 a second with a burst of 20 is q=20;w=2, so that r (never
//     above the capacity) never exceeds q.
//   - On an admission every limit's RateLimit member is sent, t being the
//     seconds until it is full again; on a refusal only the refusing
//     limits' members are, t being the seconds until that limit would
//     admit the request, never above the refusal's retry time: so a
//     client may trust r <= q and, on a refusal, Retry-After >= every t.
package ratehdr

import (
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
)

// MaxInt is the largest structured-field Integer (15 digits, RFC 9651).
const MaxInt = 999_999_999_999_999

// Quota returns the q and w (whole seconds, 0 when p has no window) that a
// limit described by p advertises; q is 0 when p has no quota. q/w is the
// rate (Quota per Window) scaled by the smallest whole factor that makes q
// at least p.Capacity and w a whole number of seconds. When no factor fits
// in 15 digits, q is the capacity (or the quota) and w the seconds it
// takes to refill, rounded up: q/w then understates the rate, never
// overstates it.
func Quota(p floodgate.Description) (q, w int64) {
	if p.Quota <= 0 {
		return 0, 0
	}
	k := int64(1)
	if p.Capacity > p.Quota {
		k = (p.Capacity + p.Quota - 1) / p.Quota
	}
	if p.Window <= 0 {
		return min(k*p.Quota, MaxInt), 0
	}
	win := int64(p.Window)
	sec := int64(time.Second)
	step := sec / gcd(win, sec) // k*win is whole seconds when step divides k
	k = (k + step - 1) / step * step
	if k <= MaxInt/p.Quota && k <= math.MaxInt64/win {
		return k * p.Quota, k * win / sec
	}
	q = min(max(p.Capacity, p.Quota), MaxInt)
	refill := float64(q) / float64(p.Quota) * float64(win) / float64(sec)
	w = MaxInt
	if refill < MaxInt {
		w = max(int64(refill), 1)
		if float64(w) < refill {
			w++
		}
	}
	return q, w
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Seconds rounds d up to whole seconds, 0 for d <= 0, at most MaxInt.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return min(s, MaxInt)
}

// Member returns a limit's RateLimit member, r and t, and whether it is
// sent at all, from the limit's decision d and its q (0: unknown). retry is
// the refusal's retry time, 0 on an admission; delayRefused says the
// refusal is a shaping delay that was not honoured.
//
// On an admission every member is sent: r is what d says is left and t
// the seconds until the limit is full again. On a refusal only the
// refusing limits' members are: those that refused, or that would have
// delayed a delayRefused request (r 0 for these); t is the seconds until
// the limit would admit the request, at most retry rounded up, so that
// Retry-After (retry rounded up, at least 1, plus any jitter) is never
// below a t. r never exceeds q or d.Limit.
func Member(d floodgate.Decision, q int64, retry time.Duration, delayRefused bool) (r, t int64, send bool) {
	r = max(0, min(d.Remaining, d.Limit, MaxInt))
	if q > 0 {
		r = min(r, q)
	}
	if retry <= 0 {
		return r, Seconds(d.ResetAfter), true
	}
	wait := d.RetryAfter
	switch {
	case !d.Allowed:
	case delayRefused && d.Delay > 0:
		r, wait = 0, d.Delay
	default:
		return 0, 0, false
	}
	if wait <= 0 {
		wait = d.ResetAfter
	}
	return r, min(Seconds(wait), Seconds(retry)), true
}

// Fields records header fields formatted into one buffer, in order: field
// k is Key[k] = buf[From[k]:To[k]]. A response has eight at most.
type Fields struct {
	Key      [8]string
	From, To [8]int
	N        int
}

// Add records field key = buf[from:to].
func (f *Fields) Add(key string, from, to int) {
	f.Key[f.N], f.From[f.N], f.To[f.N] = key, from, to
	f.N++
}
