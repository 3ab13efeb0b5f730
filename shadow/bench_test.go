package shadow_test

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// threadCPU returns the CPU time the calling thread has used: on a shared,
// loaded machine the wall time of a benchmark counts the time others ran,
// its thread's CPU time does not. The goroutine must be locked to its
// thread.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerOp reports the thread's CPU time per iteration of the benchmark
// loop (cpu-ns/op) beside the wall time.
func cpuPerOp(b *testing.B, loop func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadCPU()
	n := 0
	for b.Loop() {
		loop()
		n++
	}
	if n > 0 {
		b.ReportMetric(float64(threadCPU()-t0)/float64(n), "cpu-ns/op")
	}
}

// warm records decisions of every key, in real time, until two windows
// have begun since the policy was tracked, so that a benchmark measures
// the steady state (the sample sized to the keys at the first window
// change), not the first window's. (Decisions timed before the policy's
// current window change no window: warming in the past would not do.)
func warm(d *shadow.Demand, keys []string) {
	win := int64(d.Window())
	until := (time.Now().UnixNano()/win + 2) * win
	for time.Now().UnixNano() < until {
		for _, k := range keys {
			d.Observe(k, 1, false)
		}
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
	}
	return keys
}

// BenchmarkObserve is the cost of recording one decision, on the default
// clock, over 100, 10,000 and 1,000,000 keys (every key sampled; a quarter
// of them; one in 512).
func BenchmarkObserve(b *testing.B) {
	for _, n := range []int{100, 10_000, 1_000_000} {
		b.Run(fmt.Sprint("keys=", n), func(b *testing.B) {
			rec, err := shadow.New(shadow.Config{})
			require.NoError(b, err)
			defer rec.Close()
			d, err := rec.Track("api", time.Second, 100)
			require.NoError(b, err)
			keys := benchKeys(n)
			warm(d, keys)
			b.ReportAllocs()
			i := 0
			cpuPerOp(b, func() {
				d.Observe(keys[i], 1, false)
				if i++; i == len(keys) {
					i = 0
				}
			})
		})
	}
}

// BenchmarkObserveParallel is BenchmarkObserve from every P at once.
func BenchmarkObserveParallel(b *testing.B) {
	rec, err := shadow.New(shadow.Config{})
	require.NoError(b, err)
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 100)
	require.NoError(b, err)
	keys := benchKeys(10000)
	warm(d, keys)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(time.Now().UnixNano() % int64(len(keys)))
		for pb.Next() {
			d.Observe(keys[i], 1, false)
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

// BenchmarkDecision is a decision of one policy through a policy.Live on
// memstore, without recording (plain) and on a recording store
// (recorded): run them interleaved, e.g.
//
//	for i in 1 2 3 4 5 6; do go test -run '^$' -bench 'Decision/' -count 1 ./shadow/; done
func BenchmarkDecision(b *testing.B) {
	keys := benchKeys(10000)
	for _, mode := range []string{"plain", "recorded"} {
		b.Run(mode, func(b *testing.B) {
			mem, err := memstore.New()
			require.NoError(b, err)
			defer mem.Close()
			var s store.Store = mem
			if mode == "recorded" {
				rec, err := shadow.New(shadow.Config{})
				require.NoError(b, err)
				defer rec.Close()
				s, err = rec.Store(mem)
				require.NoError(b, err)
				d, err := rec.Track("api", time.Second, 1_000_000)
				require.NoError(b, err)
				warm(d, keys)
			}
			live, err := policy.NewLive(policy.Config{
				Policies:    []policy.Policy{{Name: "api", Rate: floodgate.PerSecond(1_000_000)}},
				DefaultPlan: "api",
			}, s)
			require.NoError(b, err)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			cpuPerOp(b, func() {
				if _, err := live.Take(ctx, keys[i], 1); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(keys) {
					i = 0
				}
			})
		})
	}
}

// The memory of a policy's recording is fixed when it is made: feeding it
// 1,000 to 1,000,000 keys (over several windows) adds nothing, and the
// whole stays under its stated bound (MaxPolicyBytes for the defaults).
func TestMemoryBounded(t *testing.T) {
	sizes := []int{1_000, 10_000, 100_000, 1_000_000}
	if testing.Short() || raceEnabled {
		sizes = sizes[:3]
	}
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			clk := newFakeClock()
			rec, err := shadow.New(shadow.Config{Clock: clk})
			require.NoError(t, err)
			defer rec.Close()
			keys := benchKeys(n)
			var before, made, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			d, err := rec.Track("api", time.Second, 100)
			require.NoError(t, err)
			runtime.GC()
			runtime.ReadMemStats(&made)
			base := clk.Now().UnixNano()
			for w := range 3 {
				for i, k := range keys {
					clk.Set(base + int64(w)*int64(time.Second) + int64(i)*int64(time.Second)/int64(n))
					d.Observe(k, int64(1+i%3), i%50 == 0)
				}
			}
			rep := d.ReportAt(clk.Now().UnixNano() + int64(time.Second))
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(d)
			runtime.KeepAlive(keys)
			grown := int64(after.HeapAlloc) - int64(made.HeapAlloc)
			size := int64(made.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%d keys: policy recording %d B (by construction %d B), grew %d B while recording; sample rate %v, keys %.0f",
				n, size, d.Bytes(), grown, rep.SampleRate, rep.Keys)
			assert.LessOrEqual(t, d.Bytes(), shadow.MaxPolicyBytes)
			assert.LessOrEqual(t, size, int64(shadow.MaxPolicyBytes))
			// The report itself allocates (its slices); the recording does
			// not grow: allow the report's few KiB.
			assert.Less(t, grown, int64(16<<10))
			assert.InEpsilon(t, n, rep.Keys, 0.12)
		})
	}
}
