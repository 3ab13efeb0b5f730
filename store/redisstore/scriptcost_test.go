package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/window"
)

// BenchmarkScriptCost measures what one call costs the Redis server, the
// resource a busy limiter runs out of first (Redis runs scripts on one
// thread): besides ns/op, each sub-benchmark reports redis-µs/call, the
// server's own CPU time per script call from INFO commandstats (evalsha and
// fcall together). group3-fixed is the call of an Envoy rate limit service
// with three descriptors: one ApplyAll of three fixed windows on distinct
// keys, every op admitted; group3-fixed-shared the same with two of the
// keys the same on every call. oneword-bucket is one token bucket Take. Each
// runs as the store runs it (FCALL) and as on a server without functions
// (EVALSHA).
func BenchmarkScriptCost(b *testing.B) {
	for _, mode := range []string{"fcall", "evalsha"} {
		opts := []Option{WithCoalescing(0)}
		if mode == "evalsha" {
			opts = append(opts, withEvalOnly())
		}
		b.Run(mode, func(b *testing.B) { benchScriptCost(b, opts) })
	}
}

func benchScriptCost(b *testing.B, opts []Option) {
	ctx := context.Background()
	b.Run("group3-fixed", func(b *testing.B) {
		s := benchClient(b, opts...)
		var algs [3]algo.Algorithm
		for i, w := range []time.Duration{time.Second, time.Minute, time.Hour} {
			a, err := window.Config{Limit: 1_000_000_000, Window: w}.FixedAlgorithm()
			if err != nil {
				b.Fatal(err)
			}
			algs[i] = a
		}
		out := make([]floodgate.Decision, 3)
		ops := make([]store.Op, 3)
		serverCost(b, s.client, func(i int) error {
			k := benchKeys[i&1023]
			for j := range ops {
				ops[j] = store.Op{Key: k + ":" + strconv.Itoa(j), Alg: algs[j], N: 1}
			}
			all, err := s.ApplyAll(ctx, ops, out, true)
			if err == nil && !all {
				b.Fatal("refused")
			}
			return err
		})
	})
	// The load of the rls benchmark: two descriptors every call shares (an
	// origin and a service under it) and one of many tenants.
	b.Run("group3-fixed-shared", func(b *testing.B) {
		s := benchClient(b, opts...)
		var algs [3]algo.Algorithm
		for i := range algs {
			a, err := window.Config{Limit: 1_000_000_000, Window: time.Minute}.FixedAlgorithm()
			if err != nil {
				b.Fatal(err)
			}
			algs[i] = a
		}
		out := make([]floodgate.Decision, 3)
		ops := []store.Op{{Key: "origin", Alg: algs[0], N: 1}, {Key: "origin/service", Alg: algs[1], N: 1}, {Alg: algs[2], N: 1}}
		serverCost(b, s.client, func(i int) error {
			ops[2].Key = benchKeys[i&1023]
			all, err := s.ApplyAll(ctx, ops, out, true)
			if err == nil && !all {
				b.Fatal("refused")
			}
			return err
		})
	})
	b.Run("oneword-bucket", func(b *testing.B) {
		s := benchClient(b, opts...)
		a := tokenBucket(b, floodgate.PerSecond(1_000_000), 1_000_000)
		serverCost(b, s.client, func(i int) error {
			d, err := s.Apply(ctx, benchKeys[i&1023], a, 1)
			if err == nil && !d.Allowed {
				b.Fatal("refused")
			}
			return err
		})
	})
}

// serverCost runs op serially b.N times and reports the Redis server's
// time per script call meanwhile: redis-µs/call, the time INFO
// commandstats counts in the script commands, and redis-cpu-µs/call, the
// CPU time (user and system, INFO cpu) of the whole server, which the
// load of other processes disturbs less.
func serverCost(b *testing.B, c rueidis.Client, op func(i int) error) {
	b.ReportAllocs()
	u0, n0 := scriptStats(b, c)
	c0 := serverCPU(b, c)
	i := 0
	for b.Loop() {
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		i++
	}
	c1 := serverCPU(b, c)
	u1, n1 := scriptStats(b, c)
	if n1 > n0 {
		b.ReportMetric((u1-u0)/(n1-n0), "redis-µs/call")
		b.ReportMetric((c1-c0)*1e6/(n1-n0), "redis-cpu-µs/call")
	}
}

// serverCPU is the CPU time of the server in seconds (INFO cpu).
func serverCPU(b *testing.B, c rueidis.Client) float64 {
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			x, _ := strconv.ParseFloat(v, 64)
			sum += x
		}
	}
	return sum
}

// scriptStats sums the usec and calls of the script commands in INFO
// commandstats.
func scriptStats(b *testing.B, c rueidis.Client) (usec, calls float64) {
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval" && name != "cmdstat_fcall") {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += x
			case "usec":
				usec += x
			}
		}
	}
	return usec, calls
}

// BenchmarkBatchCost measures what a coalesced batch of 32 token-bucket
// decisions (distinct keys, all admitted) costs the Redis server per
// decision: redis-µs/decision from INFO commandstats (the FCALL's time),
// redis-cpu-µs/decision from INFO cpu. This is the call a busy limiter
// makes (see coalesce.go).
func BenchmarkBatchCost(b *testing.B) {
	const size = 32
	s := benchClient(b)
	p, err := s.prepare(tokenBucket(b, floodgate.PerSecond(1_000_000), 1_000_000))
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]*call, size)
	for i := range batch {
		batch[i] = &call{done: make(chan struct{}, 1)}
	}
	c := s.client
	b.ReportAllocs()
	u0, n0 := scriptStats(b, c)
	c0 := serverCPU(b, c)
	i := 0
	for b.Loop() {
		for j, cl := range batch {
			cl.key, cl.n = benchKeys[(i*size+j)&1023], 1
			cl.state.Store(callWaiting)
		}
		p.co.runBatch(batch)
		for _, cl := range batch {
			<-cl.done
			if cl.err != nil || !cl.d.Allowed {
				b.Fatalf("%+v, %v", cl.d, cl.err)
			}
		}
		i++
	}
	c1 := serverCPU(b, c)
	u1, n1 := scriptStats(b, c)
	if n1 > n0 {
		b.ReportMetric((u1-u0)/(n1-n0)/size, "redis-µs/decision")
		b.ReportMetric((c1-c0)*1e6/(n1-n0)/size, "redis-cpu-µs/decision")
	}
}
