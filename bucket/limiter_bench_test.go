package bucket

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/monotime"
	"golang.org/x/time/rate"
)

// allower is the method both limiters share.
type allower interface{ Allow() bool }

// benchLimiters runs body on floodgate's Limiter and on x/time/rate's, built
// with the same limit and burst, side by side in one run.
func benchLimiters(b *testing.B, limit float64, burst int, body func(*testing.B, allower)) {
	b.Run("floodgate", func(b *testing.B) { body(b, NewLimiter(Limit(limit), burst)) })
	b.Run("xrate", func(b *testing.B) { body(b, rate.NewLimiter(rate.Limit(limit), burst)) })
}

// cpuTime returns the CPU time used by the calling thread (who ==
// RUSAGE_THREAD) or the process (RUSAGE_SELF). The machine the benchmarks
// run on is shared: wall-clock ns/op includes the time other processes hold
// the cores, CPU ns/op does not.
func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const rusageThread = 1 // RUSAGE_THREAD (Linux)

func serialAllow(b *testing.B, l allower) {
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := 0
	cpu := cpuTime(rusageThread)
	for b.Loop() {
		if l.Allow() {
			n++
		}
	}
	b.ReportMetric(float64(cpuTime(rusageThread)-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(n)/float64(b.N), "admitted/op")
}

func parallelAllow(b *testing.B, l allower) {
	b.ReportAllocs()
	cpu := cpuTime(syscall.RUSAGE_SELF)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow()
		}
	})
	b.ReportMetric(float64(cpuTime(syscall.RUSAGE_SELF)-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkAllow compares Allow with x/time/rate's in two regimes: "admit"
// (1e9/s, every call takes a token: a CAS per call) and "deny" (1/s, nearly
// every call is refused: floodgate only reads its state word), each serial
// and with RunParallel.
func BenchmarkAllow(b *testing.B) {
	regimes := []struct {
		name  string
		limit float64
		burst int
	}{
		{"admit", 1e9, 1 << 30},
		{"deny", 1, 1},
	}
	for _, r := range regimes {
		b.Run("serial/"+r.name, func(b *testing.B) { benchLimiters(b, r.limit, r.burst, serialAllow) })
		b.Run("parallel/"+r.name, func(b *testing.B) { benchLimiters(b, r.limit, r.burst, parallelAllow) })
	}
}

var sinkNS int64

// BenchmarkClock measures the clock reads the two limiters pay for in Allow:
// monotime.Nanotime (floodgate) and time.Now (x/time/rate).
func BenchmarkClock(b *testing.B) {
	b.Run("monotime.Nanotime", func(b *testing.B) {
		for b.Loop() {
			sinkNS += monotime.Nanotime()
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sinkNS += time.Now().UnixNano()
		}
	})
}
