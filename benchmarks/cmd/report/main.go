// Command report runs every floodgate benchmark against its peers in one run
// and writes BENCHMARKS.md (and an SVG chart of ns/op per library).
//
//	cd benchmarks && go run ./cmd/report                # the full report
//	go run ./cmd/report -count 3 -benchtime 200ms       # quicker, noisier
//	go run ./cmd/report -in bench.txt                   # from saved output
//
// Benchmarks are named Benchmark<Group>/<case>/<library>. The benchmarks run
// in -count rounds, each round running every benchmark once (go test -count
// 1), so that the libraries compared are measured interleaved (A B A B ...),
// not all runs of one and then all of the other: a slow spell of a shared
// machine hits both. For every group and case the report gives the median of
// each figure over the rounds and the ratio of floodgate's figure to each
// peer's, per round: its median and its min-max over the rounds (below 1
// means floodgate is faster); a ratio whose range crosses 1.0 is marked.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	var (
		count     = flag.Int("count", 6, "rounds: runs of each benchmark, interleaved (medians and ranges are reported)")
		benchtime = flag.String("benchtime", "500ms", "go test -benchtime")
		bench     = flag.String("bench", ".", "go test -bench pattern")
		in        = flag.String("in", "", "read benchmark output from this file instead of running go test")
		out       = flag.String("out", "BENCHMARKS.md", "markdown report to write")
		svg       = flag.String("svg", "benchmarks.svg", "SVG chart to write, next to the report")
		raw       = flag.String("raw", "bench.txt", "file to keep the raw go test output in (for benchstat)")
	)
	flag.Parse()
	log.SetFlags(0)

	var output []byte
	if *in != "" {
		b, err := os.ReadFile(*in)
		if err != nil {
			log.Fatal(err)
		}
		output = b
	} else {
		output = runBenchmarks(*bench, *benchtime, *count, *raw)
	}
	res := addOverhead(parse(bytes.NewReader(output)))
	if len(res) == 0 {
		log.Fatal("report: no benchmark results parsed")
	}
	md := render(res, filepath.Base(*svg), *count, *benchtime)
	if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*svg, []byte(chart(res)), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("wrote %s and %s (%d results)\n", *out, *svg, len(res))
}

func runBenchmarks(pattern, benchtime string, count int, raw string) []byte {
	// The test binary is built once and run once per round.
	dir, err := os.MkdirTemp("", "floodgate-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "floodgate-bench.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		log.Fatalf("go test -c: %v", err)
	}
	var buf bytes.Buffer
	for round := 1; round <= count; round++ {
		args := []string{"-test.run", "^$", "-test.bench", pattern, "-test.benchmem",
			"-test.benchtime", benchtime, "-test.count", "1", "-test.timeout", "60m"}
		log.Printf("round %d of %d: %s %s", round, count, filepath.Base(bin), strings.Join(args, " "))
		cmd := exec.Command(bin, args...)
		cmd.Stdout = io.MultiWriter(&buf, os.Stderr)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			log.Fatalf("benchmarks: %v", err)
		}
	}
	// The BytesPerKey group inserts a million keys per iteration: one is enough.
	if pattern == "." {
		args := []string{"test", "-run", "^$", "-bench", "BytesPerKey", "-benchtime", "1x", "-count", "1", "."}
		cmd := exec.Command("go", args...)
		cmd.Stdout = io.MultiWriter(&buf, os.Stderr)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			log.Fatalf("go test: %v", err)
		}
	}
	if raw != "" {
		_ = os.WriteFile(raw, buf.Bytes(), 0o644)
	}
	return buf.Bytes()
}

// result is the medians of one benchmark (group/case/library).
type result struct {
	group, cas, lib string
	metrics         map[string]float64   // unit -> median
	samples         map[string][]float64 // unit -> one sample per round, in order
}

var lineRE = regexp.MustCompile(`^Benchmark([^/\s]+)/(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader) []result {
	samples := map[string]map[string][]float64{}
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		name := m[1] + "/" + m[2]
		fields := strings.Fields(m[3])
		if _, ok := samples[name]; !ok {
			samples[name] = map[string][]float64{}
			order = append(order, name)
		}
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			samples[name][fields[i+1]] = append(samples[name][fields[i+1]], v)
		}
	}
	var res []result
	for _, name := range order {
		parts := strings.Split(name, "/")
		r := result{group: parts[0], metrics: map[string]float64{}, samples: samples[name]}
		if len(parts) == 2 {
			r.lib = parts[1]
		} else {
			r.cas = strings.Join(parts[1:len(parts)-1], "/")
			r.lib = parts[len(parts)-1]
		}
		for unit, vs := range samples[name] {
			r.metrics[unit] = median(vs)
		}
		res = append(res, r)
	}
	return res
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// table groups results by group and case, floodgate first.
type table struct {
	group, cas string
	rows       []result
}

func tables(res []result) []table {
	var ts []table
	idx := map[string]int{}
	for _, r := range res {
		k := r.group + "\x00" + r.cas
		i, ok := idx[k]
		if !ok {
			i = len(ts)
			idx[k] = i
			ts = append(ts, table{group: r.group, cas: r.cas})
		}
		ts[i].rows = append(ts[i].rows, r)
	}
	for i := range ts {
		slices.SortStableFunc(ts[i].rows, func(a, b result) int {
			return boolInt(!isOurs(a.lib)) - boolInt(!isOurs(b.lib))
		})
	}
	return ts
}

func isOurs(lib string) bool { return strings.HasPrefix(lib, "floodgate") }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func render(res []result, svgName string, count int, benchtime string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# floodgate benchmarks\n\n")
	fmt.Fprintf(&b, "Generated by `cd benchmarks && go run ./cmd/report` on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- Machine: %s, %d cores (GOMAXPROCS %d), %s/%s\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "- Go: %s\n", goVersion())
	fmt.Fprintf(&b, "- Method: %d rounds, each running every benchmark once (`-benchtime %s`), so that the libraries compared are measured interleaved; figures are medians over the rounds. ", count, benchtime)
	fmt.Fprintf(&b, "The ratio column is floodgate's figure divided by the peer's, per round: the median, and in brackets the min-max over the rounds; below 1.00 floodgate is faster (or smaller), and \"crosses 1.0\" marks a comparison this run does not settle. ")
	fmt.Fprintf(&b, "The Redis tables add the Redis server's CPU per operation (`%s`: the growth of INFO cpu's used_cpu_user + used_cpu_sys over each run, divided by its operations, measured in the same interleaved run) and its ratio. ", cpuUnit)
	fmt.Fprintf(&b, "Rows named floor-* are not libraries: each does only the work that the rows it stands for cannot do without, on this machine (its benchmark says what, and which rows do that work: e.g. the Redis floor reads the server's clock and keeps a one-word state, as floodgate and redis_rate do and ulule's fixed window does not), so that floor / peer, written under the table, bounds the ratio a library doing that work can reach. Baseline rows (bare, *-PING) do less than any limiter. ")
	fmt.Fprintf(&b, "The raw output is kept in `bench.txt` for `benchstat`.\n\n")
	fmt.Fprintf(&b, "![ns/op per library](%s)\n\n", svgName)
	for _, t := range tables(res) {
		title := t.group
		if t.cas != "" {
			title += " / " + t.cas
		}
		fmt.Fprintf(&b, "## %s\n\n", title)
		units := unitsOf(t.rows)
		fmt.Fprintf(&b, "| library |")
		for _, u := range units {
			fmt.Fprintf(&b, " %s |", u)
		}
		key := primaryUnit(units)
		// The Redis server's CPU gets a ratio column of its own.
		var extra []string
		if key != cpuUnit && slices.Contains(units, cpuUnit) {
			extra = append(extra, cpuUnit)
		}
		fmt.Fprintf(&b, " floodgate / this |")
		for range extra {
			fmt.Fprintf(&b, " Redis CPU, floodgate / this |")
		}
		fmt.Fprintf(&b, "\n|---|")
		for range len(units) + 1 + len(extra) {
			fmt.Fprintf(&b, "---:|")
		}
		fmt.Fprintf(&b, "\n")
		var ours float64
		var oursRow result
		for _, r := range t.rows {
			if isOurs(r.lib) {
				ours, oursRow = r.metrics[key], r
				break
			}
		}
		for _, r := range t.rows {
			fmt.Fprintf(&b, "| %s |", r.lib)
			for _, u := range units {
				fmt.Fprintf(&b, " %s |", format(r.metrics[u], u))
			}
			ratio := "—"
			if !isOurs(r.lib) && ours > 0 && r.metrics[key] > 0 {
				ratio = ratioText(oursRow, r, key)
			}
			fmt.Fprintf(&b, " %s |", ratio)
			for _, u := range extra {
				ratio := "—"
				if !isOurs(r.lib) && oursRow.metrics[u] > 0 && r.metrics[u] > 0 {
					ratio = ratioText(oursRow, r, u)
				}
				fmt.Fprintf(&b, " %s |", ratio)
			}
			fmt.Fprintf(&b, "\n")
		}
		fmt.Fprintf(&b, "\n")
		writeFloor(&b, t.rows, key, extra)
	}
	return b.String()
}

// isFloor tells a floor row: not a library, only the work that the rows
// it stands for cannot do without (each floor's benchmark says what).
func isFloor(lib string) bool { return strings.HasPrefix(lib, "floor") }

// isBaseline tells a row that does less than any limiter: the bare
// handler, a Redis PING.
func isBaseline(lib string) bool { return lib == "bare" || strings.HasSuffix(lib, "-PING") }

// writeFloor writes, under a table with a floor row, the floor's figure
// over each peer's (baselines left out): how far below a peer a library
// doing the floor's work can go on this machine.
func writeFloor(b *strings.Builder, rows []result, key string, extra []string) {
	for _, f := range rows {
		if !isFloor(f.lib) {
			continue
		}
		var parts []string
		for _, r := range rows {
			if isOurs(r.lib) || isFloor(r.lib) || isBaseline(r.lib) || r.metrics[key] <= 0 {
				continue
			}
			part := r.lib + " " + ratioText(f, r, key)
			for _, u := range extra {
				if f.metrics[u] > 0 && r.metrics[u] > 0 {
					part += ", Redis CPU " + ratioText(f, r, u)
				}
			}
			parts = append(parts, part)
		}
		if len(parts) > 0 {
			fmt.Fprintf(b, "%s (not a library: see above) / this: %s.\n\n", f.lib, strings.Join(parts, "; "))
		}
	}
}

// ratioText is floodgate's figure over the peer's: the median of the
// per-round ratios and their min-max, marked when the range crosses 1.0
// (the comparison is then not settled by this run).
func ratioText(ours, peer result, unit string) string {
	a, b := ours.samples[unit], peer.samples[unit]
	n := min(len(a), len(b))
	var rs []float64
	for i := range n {
		if a[i] > 0 && b[i] > 0 {
			rs = append(rs, a[i]/b[i])
		}
	}
	if len(rs) == 0 {
		return fmt.Sprintf("%.2fx", ours.metrics[unit]/peer.metrics[unit])
	}
	lo, hi := slices.Min(rs), slices.Max(rs)
	text := fmt.Sprintf("%.2fx (%.2f-%.2f)", median(rs), lo, hi)
	if len(rs) == 1 {
		text = fmt.Sprintf("%.2fx", rs[0])
	}
	if unit == "ops/s" {
		text += " throughput"
	}
	if lo < 1 && hi > 1 {
		text += " crosses 1.0"
	}
	return text
}

// addOverhead gives every row of a table that has a "bare" row (a handler
// without middleware) the metric overhead-ns/op: its ns/op minus bare's. Ratios
// in such tables compare overheads.
func addOverhead(res []result) []result {
	bare := map[string]float64{}
	for _, r := range res {
		if r.lib == "bare" {
			bare[r.group+"\x00"+r.cas] = r.metrics["ns/op"]
		}
	}
	bareSamples := map[string][]float64{}
	for _, r := range res {
		if r.lib == "bare" {
			bareSamples[r.group+"\x00"+r.cas] = r.samples["ns/op"]
		}
	}
	for _, r := range res {
		k := r.group + "\x00" + r.cas
		if b, ok := bare[k]; ok && r.lib != "bare" {
			r.metrics["overhead-ns/op"] = r.metrics["ns/op"] - b
			bs, own := bareSamples[k], r.samples["ns/op"]
			var ov []float64
			for i := range min(len(bs), len(own)) {
				ov = append(ov, own[i]-bs[i])
			}
			r.samples["overhead-ns/op"] = ov
		}
	}
	return res
}

var unitOrder = []string{"ns/op", "overhead-ns/op", "B/key", "ops/s", cpuUnit, "B/op", "allocs/op"}

// cpuUnit is the Redis server's CPU per operation (see BenchmarkRedis).
const cpuUnit = "redis-cpu-us/op"

func unitsOf(rows []result) []string {
	seen := map[string]bool{}
	for _, r := range rows {
		for u := range r.metrics {
			seen[u] = true
		}
	}
	var us []string
	for _, u := range unitOrder {
		if seen[u] {
			us = append(us, u)
			delete(seen, u)
		}
	}
	var rest []string
	for u := range seen {
		rest = append(rest, u)
	}
	sort.Strings(rest)
	us = append(us, rest...)
	// B/key groups: ns/op is the cost of a million inserts, not a figure of merit.
	if slices.Contains(us, "B/key") {
		us = slices.DeleteFunc(us, func(u string) bool { return u == "ns/op" || u == "B/op" || u == "allocs/op" })
	}
	return us
}

func primaryUnit(units []string) string {
	for _, u := range []string{"B/key", "overhead-ns/op", "ops/s", "ns/op"} {
		if slices.Contains(units, u) {
			return u
		}
	}
	if len(units) > 0 {
		return units[0]
	}
	return "ns/op"
}

func format(v float64, unit string) string {
	switch {
	case unit == "allocs/op" || unit == "B/op":
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "model name") {
			if i := strings.IndexByte(line, ':'); i >= 0 {
				return strings.TrimSpace(line[i+1:])
			}
		}
	}
	return runtime.GOARCH
}

func goVersion() string {
	out, err := exec.Command("go", "version").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimSpace(string(out))
}
