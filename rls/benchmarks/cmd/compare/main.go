// Command compare measures ShouldRateLimit throughput and latency (p50,
// p99) of floodgate-rls and of envoyproxy/ratelimit, both built from their
// modules and run as processes on loopback, with one config, one Redis and
// one load: C concurrent callers on one gRPC connection each target,
// interleaved rounds (reference on Redis, floodgate on Redis, floodgate on
// its memory store, and nullrls, a grpc-go server that decides nothing: the
// ceiling of the transport), so that the noise of a shared machine falls on
// all of them alike.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The config both services load: the image origin and the purge
// orchestrator under it, and a limit per tenant, high enough that the load
// measures deciding, not refusing.
const config = `domain: edge
descriptors:
  - key: destination_cluster
    value: image-origin.prod
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
    descriptors:
      - key: source_service
        value: purge-orchestrator
        rate_limit:
          unit: second
          requests_per_unit: 500000000
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 1000000000
`

func main() {
	rounds := flag.Int("rounds", 6, "interleaved rounds")
	duration := flag.Duration("duration", 3*time.Second, "the length of one measurement")
	callers := flag.Int("callers", 64, "concurrent callers")
	tenants := flag.Int("tenants", 10000, "distinct tenants in the load")
	flag.Parse()
	redis := os.Getenv("FLOODGATE_REDIS_ADDR")
	if redis == "" {
		fail(fmt.Errorf("FLOODGATE_REDIS_ADDR is not set (scripts/redis.sh start)"))
	}
	work, err := os.MkdirTemp("", "rls-compare-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(work)
	fgDir := writeConfigs(work)
	refBin := filepath.Join(work, "ratelimit")
	fgBin := filepath.Join(work, "floodgate-rls")
	nullBin := filepath.Join(work, "nullrls")
	build(refBin, "github.com/envoyproxy/ratelimit/src/service_cmd", "GOWORK=off") // its own module's versions, not go.work's
	build(fgBin, "github.com/floodgate-go/floodgate/rls/cmd/floodgate-rls")
	build(nullBin, "github.com/floodgate-go/floodgate/rls/benchmarks/cmd/nullrls")

	refPort, fgRedisPort, fgMemPort, nullPort := freePort(), freePort(), freePort(), freePort()
	ref := exec.Command(refBin)
	ref.Env = append(os.Environ(),
		// Metrics on, as floodgate-rls keeps its Prometheus counters.
		"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:"+strconv.Itoa(freePort()),
		"LOG_LEVEL=error", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis,
		"RUNTIME_ROOT="+filepath.Join(work, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(refPort),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(freePort()),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(freePort()))
	fgRedis := exec.Command(fgBin, "-config", fgDir, "-addr", "127.0.0.1:"+strconv.Itoa(fgRedisPort), "-redis", redis,
		"-redis-prefix", fmt.Sprintf("rls-compare:%d:", time.Now().UnixNano()), "-redis-timeout", "1s")
	fgMem := exec.Command(fgBin, "-config", fgDir, "-addr", "127.0.0.1:"+strconv.Itoa(fgMemPort))
	null := exec.Command(nullBin, "-addr", "127.0.0.1:"+strconv.Itoa(nullPort))
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	}()
	for _, p := range []*exec.Cmd{ref, fgRedis, fgMem, null} {
		if p != ref { // the reference logs every stats flush
			p.Stdout, p.Stderr = os.Stderr, os.Stderr
		}
		if err := p.Start(); err != nil {
			fail(err)
		}
		procs = append(procs, p)
	}
	targets := []target{
		{"envoyproxy/ratelimit, Redis", refPort, ref.Process.Pid},
		{"floodgate-rls, Redis", fgRedisPort, fgRedis.Process.Pid},
		{"floodgate-rls, memstore", fgMemPort, fgMem.Process.Pid},
		{"nullrls (decides nothing)", nullPort, null.Process.Pid},
	}
	clients := make([]rlspb.RateLimitServiceClient, len(targets))
	for i, t := range targets {
		conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(t.port), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fail(err)
		}
		defer conn.Close()
		clients[i] = rlspb.NewRateLimitServiceClient(conn)
		ready(clients[i], t.name, t.port != nullPort)
	}
	fmt.Printf("ShouldRateLimit, %d callers, %d rounds of %v per target, interleaved; each request: the origin and purge-orchestrator descriptors and one of %d tenants\n\n",
		*callers, *rounds, *duration, *tenants)
	redisPid := redisPID(redis)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redis}, DisableCache: true})
	if err != nil {
		fail(err)
	}
	defer rc.Close()
	results := make([][]res, len(targets))
	for r := range *rounds {
		for i := range targets {
			// Alternate the order, so that no target always runs first.
			k := (i + r) % len(targets)
			cpu0, rcpu0, st0 := cpuTime(targets[k].pid), cpuTime(redisPid), commandStats(rc)
			rps, p50, p99 := load(clients[k], *callers, *duration, *tenants)
			calls := rps * duration.Seconds()
			cpu := float64((cpuTime(targets[k].pid) - cpu0).Microseconds()) / calls
			rcpu := float64((cpuTime(redisPid) - rcpu0).Microseconds()) / calls
			usec, cmds := commandStats(rc).since(st0)
			results[k] = append(results[k], res{rps, p50, p99, cpu, rcpu, usec / calls, cmds / calls})
			fmt.Printf("round %d  %-30s %9.0f calls/s  p50 %7.0f µs  p99 %7.0f µs  server CPU %5.1f µs/call  Redis CPU %5.1f µs/call  commandstats %5.1f µs/call in %4.2f commands\n",
				r+1, targets[k].name, rps, p50, p99, cpu, rcpu, usec/calls, cmds/calls)
		}
	}
	summarize(targets, results)
}

// target is one service measured.
type target struct {
	name string
	port int
	pid  int
}

// res is one measurement of one target: calls per second, latencies (µs),
// the server's and Redis's CPU per call (µs), Redis's command time per call
// (µs) and commands per call.
type res struct{ rps, p50, p99, cpu, rcpu, cmdUsec, cmds float64 }

// summarize prints the medians and ranges of every target, and the
// per-round ratios against the reference (targets[0]) and of the memory
// store against the transport's ceiling.
func summarize(targets []target, results [][]res) {
	fmt.Printf("\n%-30s %-28s %-24s %-24s %-20s %-20s\n", "target", "calls/s median (min-max)", "p50 µs median (min-max)", "p99 µs median (min-max)", "server CPU µs/call", "Redis CPU µs/call")
	for i, t := range targets {
		col := func(f func(res) float64) string {
			var v []float64
			for _, x := range results[i] {
				v = append(v, f(x))
			}
			m, lo, hi := stats(v)
			return fmt.Sprintf("%.0f (%.0f-%.0f)", m, lo, hi)
		}
		fmt.Printf("%-30s %-28s %-24s %-24s %-20s %-20s\n", t.name, col(func(x res) float64 { return x.rps }), col(func(x res) float64 { return x.p50 }),
			col(func(x res) float64 { return x.p99 }), col(func(x res) float64 { return x.cpu }), col(func(x res) float64 { return x.rcpu }))
	}
	fmt.Printf("\n%-30s %-32s %-24s\n", "target", "commandstats µs/call (min-max)", "Redis commands per call")
	for i, t := range targets {
		var u, n []float64
		for _, x := range results[i] {
			u, n = append(u, x.cmdUsec), append(n, x.cmds)
		}
		m, lo, hi := stats(u)
		mn, _, _ := stats(n)
		fmt.Printf("%-30s %-32s %-24s\n", t.name, fmt.Sprintf("%.1f (%.1f-%.1f)", m, lo, hi), fmt.Sprintf("%.2f", mn))
	}
	fmt.Println("\nper-round ratios against the reference (throughput: higher is better; p50, p99: lower is better)")
	for i := 1; i < len(targets); i++ {
		var th, l50, l99, cpu, rcmd []float64
		for r := range results[i] {
			th = append(th, results[i][r].rps/results[0][r].rps)
			l50 = append(l50, results[i][r].p50/results[0][r].p50)
			l99 = append(l99, results[i][r].p99/results[0][r].p99)
			cpu = append(cpu, results[0][r].cpu/results[i][r].cpu)
			if results[0][r].cmdUsec > 0 {
				rcmd = append(rcmd, results[i][r].cmdUsec/results[0][r].cmdUsec)
			}
		}
		ratio := func(v []float64) string {
			m, lo, hi := stats(v)
			return fmt.Sprintf("%.2fx (%.2f-%.2f)%s", m, lo, hi, crosses(lo, hi))
		}
		fmt.Printf("%-30s throughput %s   p50 %s   p99 %s   calls per server CPU second %s   Redis commandstats µs per call %s\n", targets[i].name, ratio(th), ratio(l50), ratio(l99), ratio(cpu), ratio(rcmd))
	}
	// How close floodgate on memory comes to the transport's ceiling.
	const mem, ceil = 2, 3
	var th, cpu []float64
	for r := range results[mem] {
		th = append(th, results[mem][r].rps/results[ceil][r].rps)
		cpu = append(cpu, results[ceil][r].cpu/results[mem][r].cpu)
	}
	m, lo, hi := stats(th)
	m3, lo3, hi3 := stats(cpu)
	fmt.Printf("\n%s against %s: throughput %.2fx (%.2f-%.2f)%s   calls per server CPU second %.2fx (%.2f-%.2f)%s\n", targets[mem].name, targets[ceil].name,
		m, lo, hi, crosses(lo, hi), m3, lo3, hi3, crosses(lo3, hi3))
}

// writeConfigs writes the config where the reference reads it
// (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml under work) and where
// floodgate-rls does; it returns floodgate-rls's directory.
func writeConfigs(work string) string {
	refDir := filepath.Join(work, "runtime", "ratelimit", "config")
	fgDir := filepath.Join(work, "floodgate")
	for _, d := range []string{refDir, fgDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(filepath.Join(d, "edge.yaml"), []byte(config), 0o644); err != nil {
			fail(err)
		}
	}
	return fgDir
}

// redisPID asks the Redis at addr for its process id (it must run on this
// machine, for its CPU time to be read).
func redisPID(addr string) int {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		fail(err)
	}
	defer c.Close()
	info, err := c.Do(context.Background(), c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		fail(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err == nil {
				return pid
			}
		}
	}
	fail(fmt.Errorf("no process_id in the INFO of %s", addr))
	return 0
}

// cmdStats are Redis's INFO commandstats: per command, calls and usec.
type cmdStats map[string][2]float64

// commandStats reads INFO commandstats.
func commandStats(c rueidis.Client) cmdStats {
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		fail(err)
	}
	out := cmdStats{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var v [2]float64
		for _, kv := range strings.Split(rest, ",") {
			k, x, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(x, 64)
			switch k {
			case "calls":
				v[0] = f
			case "usec":
				v[1] = f
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = v
	}
	return out
}

// since returns the Redis time (usec) and the commands spent since
// before, INFO and the commands this program sends aside. The commands a
// script runs are listed by commandstats too, and their time is in the
// script's: when scripts ran, only the scripts (fcall, fcall_ro, evalsha,
// eval) are counted.
func (now cmdStats) since(before cmdStats) (usec, calls float64) {
	scripts := map[string]bool{"fcall": true, "fcall_ro": true, "evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true}
	var su, sc, ou, oc float64
	for k, v := range now {
		if k == "info" {
			continue
		}
		dc, du := v[0]-before[k][0], v[1]-before[k][1]
		if scripts[k] {
			su, sc = su+du, sc+dc
		} else {
			ou, oc = ou+du, oc+dc
		}
	}
	if sc > 0 {
		return su, sc
	}
	return ou, oc
}

// cpuTime is the user and system CPU time a process has used (Linux
// /proc, in clock ticks of 10 ms).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		fail(err)
	}
	// Fields after the command name (which is in parentheses): state is
	// field 3, utime 14, stime 15.
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func crosses(lo, hi float64) string {
	if lo < 1 && hi > 1 {
		return " crosses 1.0"
	}
	return ""
}

func stats(v []float64) (median, lo, hi float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	median = s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return median, s[0], s[n-1]
}

// load runs callers goroutines for d and returns calls per second and the
// p50 and p99 latencies in µs. Every call must succeed and be admitted.
func load(c rlspb.RateLimitServiceClient, callers int, d time.Duration, tenants int) (rps, p50, p99 float64) {
	var wg sync.WaitGroup
	var failed atomic.Int64
	lat := make([][]time.Duration, callers)
	deadline := time.Now().Add(d)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for time.Now().Before(deadline) {
				req := request(rnd.IntN(tenants))
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(context.Background(), req)
				lat[g] = append(lat[g], time.Since(t0))
				if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
					if failed.Add(1) == 1 {
						fmt.Fprintln(os.Stderr, "a call failed:", resp, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if failed.Load() > 0 {
		fail(fmt.Errorf("%d of %d calls failed or were refused", failed.Load(), len(all)))
	}
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) }
	return float64(len(all)) / d.Seconds(), q(0.50), q(0.99)
}

func request(tenant int) *rlspb.RateLimitRequest {
	e := func(k, v string) *ratelimitpb.RateLimitDescriptor_Entry {
		return &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	return &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{e("destination_cluster", "image-origin.prod")}},
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{e("destination_cluster", "image-origin.prod"), e("source_service", "purge-orchestrator")}},
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{e("tenant", "t"+strconv.Itoa(tenant))}},
	}}
}

// ready waits until a target answers a call correctly (with its limits when
// limits is set).
func ready(c rlspb.RateLimitServiceClient, name string, limits bool) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.ShouldRateLimit(ctx, request(0))
		cancel()
		if err == nil && resp.OverallCode == rlspb.RateLimitResponse_OK && len(resp.Statuses) == 3 && (!limits || resp.Statuses[2].CurrentLimit != nil) {
			return
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("%s does not answer: %v %v", name, resp, err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func build(out, pkg string, env ...string) {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fail(fmt.Errorf("go build %s: %w", pkg, err))
	}
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}
