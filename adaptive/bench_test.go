package adaptive_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate/adaptive"
)

// BenchmarkAcquireSuccess measures one admitted request: Acquire, then
// Success (a sample into the window).
func BenchmarkAcquireSuccess(b *testing.B) {
	l := must(adaptive.NewGate(must(adaptive.NewGradient2(adaptive.Gradient2Config{MaxLimit: 1000, InitialLimit: 1000}))))
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t, err := l.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			t.Success()
		}
	})
}

// BenchmarkReject measures a rejection at the limit.
func BenchmarkReject(b *testing.B) {
	l := must(adaptive.NewGate(must(adaptive.NewConstant(1))))
	ctx := context.Background()
	hold := must(l.Acquire(ctx))
	defer hold.Success()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Acquire(ctx); err == nil {
			b.Fatal("admitted over the limit")
		}
	}
}
