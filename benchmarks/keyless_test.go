package benchmarks

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/bucket"
	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"
)

// Keyless limiters: one budget for the whole process (caller-side
// throttling). All run 1,000,000 per second with a burst of 1,000, a mix of
// admissions and denials at benchmark speed.
const (
	keylessRate  = 1_000_000
	keylessBurst = 1000
)

type allowFunc func() bool

func keylessPeers() []struct {
	name string
	mk   func() allowFunc
} {
	return []struct {
		name string
		mk   func() allowFunc
	}{
		{"floodgate", func() allowFunc {
			return bucket.NewLimiter(bucket.Limit(keylessRate), keylessBurst).Allow
		}},
		{"x-time-rate", func() allowFunc {
			return rate.NewLimiter(rate.Limit(keylessRate), keylessBurst).Allow
		}},
		{"uber-ratelimit", func() allowFunc {
			// Take blocks until the next slot; at 1e9/s it never sleeps, so
			// this measures its bookkeeping only (its most favourable case).
			l := ratelimit.New(1_000_000_000, ratelimit.Per(time.Second))
			return func() bool { l.Take(); return true }
		}},
	}
}

func BenchmarkKeyless(b *testing.B) {
	for _, p := range keylessPeers() {
		b.Run("serial/"+p.name, func(b *testing.B) {
			allow := p.mk()
			b.ReportAllocs()
			for b.Loop() {
				allow()
			}
		})
	}
	for _, p := range keylessPeers() {
		b.Run("parallel/"+p.name, func(b *testing.B) {
			allow := p.mk()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					allow()
				}
			})
		})
	}
}
