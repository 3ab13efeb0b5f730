package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// event is one request of a log, as the test reads it itself.
type event struct {
	line int
	t    time.Time
	key  string
	cost int
}

// testClock is the library's clock in the direct decisions.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// compile compiles a policy file on a memory store whose clock the caller
// sets.
func compile(t *testing.T, path string) (*policy.Set, *testClock) {
	t.Helper()
	cfg, err := policy.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mem, clk := testStore(t)
	live, err := policy.NewLive(cfg, mem)
	if err != nil {
		t.Fatal(err)
	}
	return live.Set(), clk
}

// testStore returns a memory store on a clock the caller sets.
func testStore(t *testing.T) (*memstore.Store, *testClock) {
	t.Helper()
	clk := &testClock{}
	mem, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return mem, clk
}

// readCSV reads testdata/requests.csv with the standard library, lines
// numbered from 2 (after the header); its times have microseconds.
func readCSV(t *testing.T) []event {
	t.Helper()
	b, err := os.ReadFile("testdata/requests.csv")
	if err != nil {
		t.Fatal(err)
	}
	var evs []event
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
		f := strings.Split(line, ",")
		whole, frac, _ := strings.Cut(f[0], ".")
		s, err1 := strconv.ParseInt(whole, 10, 64)
		us, err2 := strconv.ParseInt(frac, 10, 64)
		cost, err3 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || err3 != nil || len(frac) != 6 {
			t.Fatalf("requests.csv:%d: %q", i+2, line)
		}
		evs = append(evs, event{line: i + 2, t: time.Unix(s, us*1000), key: f[1], cost: cost})
	}
	return evs
}

// replayVerdicts runs the command's replay with -verdicts and returns its
// JSON result and the verdict of each line, by line number.
func replayVerdicts(t *testing.T, args ...string) (replayResult, map[int]string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "verdicts.csv")
	stdout, stderr, code := runCmd(t, append([]string{"replay", "-json", "-verdicts", out}, args...)...)
	if code != exitOK {
		t.Fatalf("replay %v: code %d\n%s%s", args, code, stdout, stderr)
	}
	var res replayResult
	decodeJSON(t, stdout, &res)
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	for _, r := range rows[1:] {
		n, _ := strconv.Atoi(r[1])
		got[n] = r[4] + " " + r[5]
	}
	return res, got
}

// compareVerdicts checks that the replay's verdicts are the library's and
// that the sequence is not trivial (some refused, some admitted).
func compareVerdicts(t *testing.T, want, got map[int]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("replay decided %d lines, the library %d", len(got), len(want))
	}
	kinds := map[string]int{}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("line %d: replay %q, library %q", n, got[n], w)
		}
		kinds[strings.Fields(w)[0]]++
	}
	if kinds["allowed"] == 0 || kinds["refused"]+kinds["would_refuse"] == 0 {
		t.Errorf("a trivial sequence: %v", kinds)
	}
}

// readCombined reads nginx combined lines with the standard library:
// the address before the first space, the time between the brackets.
func readCombined(t *testing.T, path string) []event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var evs []event
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		addr, _, _ := strings.Cut(line, " ")
		_, rest, _ := strings.Cut(line, "[")
		ts, _, _ := strings.Cut(rest, "]")
		tm, err := time.Parse("02/Jan/2006:15:04:05 -0700", ts)
		if err != nil {
			t.Fatalf("%s:%d: %v", path, i+1, err)
		}
		evs = append(evs, event{line: i + 1, t: tm, key: addr, cost: 1})
	}
	return evs
}

func verdictOf(d floodgate.Decision, name string, dryRun bool) string {
	switch {
	case d.Allowed:
		return "allowed " + name
	case dryRun:
		return "would_refuse " + name
	}
	return "refused " + name
}

func TestReplayNginxCombinedEqualsLibrary(t *testing.T) {
	res, got := replayVerdicts(t, "-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-min-observation", "1s", "testdata/access.log")
	set, clk := compile(t, "testdata/per-ip.yaml")
	lim, _ := set.Limiter("per-ip")
	want := map[int]string{}
	refusedBy := map[string]uint64{}
	for _, e := range readCombined(t, "testdata/access.log") {
		clk.ns.Store(e.t.UnixNano())
		d, err := lim.Take(context.Background(), e.key, e.cost)
		if err != nil {
			t.Fatal(err)
		}
		want[e.line] = verdictOf(d, "per-ip", false)
		if !d.Allowed {
			refusedBy[e.key]++
		}
	}
	compareVerdicts(t, want, got)
	// The recorder's report of the replay: its refusals by key are the
	// library's (five keys: all in the top-K, counted exactly).
	if res.Lines != 162 || res.Decided != 162 || len(res.Reports) != 1 || res.Reports[0].Policy != "per-ip" {
		t.Fatalf("result: %+v", res)
	}
	rep := res.Reports[0]
	var total uint64
	for _, k := range rep.Top {
		if k.Refused != refusedBy[k.Key] {
			t.Errorf("key %s: %d refused in the report, %d by the library", k.Key, k.Refused, refusedBy[k.Key])
		}
		total += k.Refused
	}
	if rep.Refused != res.Refused || total != res.Refused || rep.Limit != 10 || rep.Windows != 2 || !rep.Recommendation.OK {
		t.Errorf("report: refused %d (replay %d, keys %d), limit %d, %d windows, recommendation %+v",
			rep.Refused, res.Refused, total, rep.Limit, rep.Windows, rep.Recommendation)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "whole seconds ($time_local)") {
		t.Errorf("notes: %q", res.Notes)
	}
}

func TestReplayCSVPlansEqualsLibrary(t *testing.T) {
	res, got := replayVerdicts(t, "-config", plansYAML, "-format", "csv", "testdata/requests.csv")
	set, clk := compile(t, plansYAML)
	want := map[int]string{}
	for _, e := range readCSV(t) {
		clk.ns.Store(e.t.UnixNano())
		lim, err := set.Plan(context.Background(), e.key)
		if err != nil || lim == nil {
			t.Fatalf("plan of %s: %v %v", e.key, lim, err)
		}
		d, err := lim.Take(context.Background(), e.key, e.cost)
		if err != nil {
			t.Fatal(err)
		}
		want[e.line] = verdictOf(d, lim.Name(), false)
	}
	compareVerdicts(t, want, got)
	if res.Mode != "plans" || res.Decided != uint64(len(want)) {
		t.Errorf("mode %q, %d decided", res.Mode, res.Decided)
	}
	seen := map[string]bool{}
	for _, r := range res.Reports {
		seen[r.Policy] = true
	}
	if !seen["free"] || !seen["pro"] || !seen["enterprise-acme"] || len(res.Reports) != 3 {
		t.Errorf("reports of %v, want free, pro and enterprise-acme", seen)
	}
}

func TestReplayEnvoyJSONDescriptorsEqualsLibrary(t *testing.T) {
	res, got := replayVerdicts(t, "-config", "testdata/per-ip.yaml", "-format", "envoy",
		"-descriptor", "remote_address=$downstream_remote_address", "-descriptor", "client=$downstream_remote_address",
		"testdata/envoy-access.log")
	set, clk := compile(t, "testdata/per-ip.yaml")
	f, err := os.Open("testdata/envoy-access.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[int]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		tm, err := time.Parse(time.RFC3339Nano, rec["start_time"].(string))
		if err != nil {
			t.Fatal(err)
		}
		host, _, err := net.SplitHostPort(rec["downstream_remote_address"].(string))
		if err != nil {
			t.Fatal(err)
		}
		clk.ns.Store(tm.UnixNano())
		// As the middleware decides: the enforcing checks all or nothing,
		// then, when admitted, the dry-run ones.
		checks, enf, err := set.Match(context.Background(), []middleware.Descriptor{
			{{Key: "remote_address", Value: host}}, {{Key: "client", Value: host}}}, 1, nil)
		if err != nil || len(checks) != 2 || enf != 1 {
			t.Fatalf("match: %d checks, %d enforcing, %v", len(checks), enf, err)
		}
		d, err := floodgate.TakeAll(context.Background(), checks[:enf])
		if err != nil {
			t.Fatal(err)
		}
		want[n] = verdictOf(d, "per-ip", false)
		if d.Allowed {
			sd, err := floodgate.TakeAll(context.Background(), checks[enf:])
			if err != nil {
				t.Fatal(err)
			}
			if !sd.Allowed {
				want[n] = "would_refuse per-ip-shadow"
			}
		}
	}
	compareVerdicts(t, want, got)
	if res.WouldRefuse == 0 || res.Refused == 0 || len(res.Reports) != 2 {
		t.Errorf("result: %+v", res)
	}
	// The dry-run policy's report counts its would-be refusals.
	for _, r := range res.Reports {
		if r.Policy == "per-ip-shadow" && r.Refused != res.WouldRefuse {
			t.Errorf("per-ip-shadow: %d refused in the report, %d would-refuse lines", r.Refused, res.WouldRefuse)
		}
	}
}

func TestReplayCustomLogFormat(t *testing.T) {
	const format = `$remote_addr [$time_iso8601] $msec "$request" $status $request_time "$http_x_api_key"`
	// On plans: the API key's; lines without one ("-") match no plan.
	res, got := replayVerdicts(t, "-config", plansYAML, "-log-format", format, "-key", "$http_x_api_key", "testdata/custom.log")
	if res.Unlimited != 10 || res.Decided != 40 || res.Refused != 0 || len(got) != 40 || len(res.Notes) != 0 {
		t.Errorf("plans: %d unlimited, %d decided, %d refused, %d verdicts, notes %q", res.Unlimited, res.Decided, res.Refused, len(got), res.Notes)
	}
	// Every address on free (10/s), the library deciding at $msec.
	_, got = replayVerdicts(t, "-config", plansYAML, "-log-format", format, "-policy", "free", "testdata/custom.log")
	set, clk := compile(t, plansYAML)
	lim, _ := set.Limiter("free")
	b, err := os.ReadFile("testdata/custom.log")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		ms, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		clk.ns.Store(int64(ms*1000+0.5) * 1e6)
		d, err := lim.Take(context.Background(), f[0], 1)
		if err != nil {
			t.Fatal(err)
		}
		want[i+1] = verdictOf(d, "free", false)
	}
	compareVerdicts(t, want, got)
}

func TestReplayInputErrors(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	b, err := os.ReadFile("testdata/access.log")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	broken := lines[0] + "this is not a log line\n" + lines[1] + `198.51.100.1 - - [31/Foo/2026:09:00:00 +0100] "GET / HTTP/1.1" 200 1 "-" "-"` + "\n"
	if err := os.WriteFile(log, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := runCmd(t, "replay", "-config", "testdata/per-ip.yaml", "-policy", "per-ip", log)
	if code != exitOK || !strings.Contains(out, "unreadable: 2") || !strings.Contains(out, log+`:2: $remote_addr: no " - " after column 1`) ||
		!strings.Contains(out, log+`:4: time_local "31/Foo/2026:09:00:00 +0100"`) {
		t.Errorf("code %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-config", "testdata/per-ip.yaml", "-policy", "per-ip", filepath.Join(dir, "missing.log")}, "missing.log"},
		{[]string{"-config", "testdata/bad.yaml", "testdata/access.log"}, "testdata/bad.yaml:6:"},
		{[]string{"-config", "testdata/per-ip.yaml", "testdata/access.log"}, "has no default_plan nor overrides"},
		{[]string{"-config", "testdata/per-ip.yaml", "-policy", "nope", "testdata/access.log"}, `-policy "nope": no such policy`},
		{[]string{"-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-format", "w3c", "testdata/access.log"}, "want nginx, envoy or csv"},
		{[]string{"-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-log-format", "$remote_addr $status", "testdata/access.log"}, "no $time_local"},
		{[]string{"-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-format", "csv", "testdata/access.log"}, "no line was decided"},
		{[]string{"testdata/access.log"}, "want -config FILE"},
	} {
		_, errs, code := runCmd(t, append([]string{"replay"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("replay %v: code %d, want 2 and %q in %q", tc.args, code, tc.want, errs)
		}
	}
	// A gate on the share refused.
	if _, _, code := runCmd(t, "replay", "-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-max-refused", "0.1", "testdata/access.log"); code != exitFindings {
		t.Errorf("-max-refused 0.1 with 56%% refused: code %d, want 1", code)
	}
	if _, _, code := runCmd(t, "replay", "-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-max-refused", "0.6", "testdata/access.log"); code != exitOK {
		t.Errorf("-max-refused 0.6 with 56%% refused: code %d, want 0", code)
	}
}

func TestReplayText(t *testing.T) {
	out, _, code := runCmd(t, "replay", "-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-min-observation", "1s", "testdata/access.log")
	wantAll(t, out,
		"replayed 162 lines of testdata/access.log (2s of traffic, 2026-12-04T08:00:00Z to 2026-12-04T08:00:02Z) through testdata/per-ip.yaml (policy per-ip)",
		"decided 162: refused 90 (55.56%)",
		"per-ip: limit 10 per 1s\n",
		"  refused by key (heaviest keys):\n    key          refused  peak/window  total\n    203.0.113.7  90       40           120",
		"  recommendation: limit 14 (p95 10.0 +40%)",
		"per-ip-shadow: token-bucket 5/s burst 5 (dry run): no line reached it",
	)
	if code != exitOK {
		t.Errorf("code %d", code)
	}
}

// FuzzParsers feeds any line to the three parsers: an error or a record,
// never a panic, and a time for every record.
func FuzzParsers(f *testing.F) {
	for _, path := range []string{"testdata/access.log", "testdata/envoy-access.log", "testdata/requests.csv", "testdata/custom.log"} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		f.Add(line)
	}
	f.Add(`{"start_time":"2026-12-04T08:00:00.5Z","downstream_remote_address":"a\"b\/c\u00e9"}`)
	f.Fuzz(func(t *testing.T, line string) {
		var fs fields
		key, _ := compileTmpl("$remote_addr$downstream_remote_address$key", &fs)
		np, err := newNginxParser(nginxCombined, &fs)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []parser{np, &jsonParser{fs: &fs, timeKey: "start_time"}, &csvParser{key: fs.lookup("key"), cost: -1}} {
			r := record{vals: make([][]byte, len(fs.names)), t: -1}
			if err := p.parse([]byte(line), &r); err == nil {
				if r.t == -1 {
					t.Errorf("%T: no time for %q", p, line)
				}
				key.render(nil, &r)
			}
		}
	})
}

func TestReplayOutOfOrderAndStdin(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "access.log.1"), filepath.Join(dir, "access.log")
	b, err := os.ReadFile("testdata/access.log")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	// Split where the second changes (lines of one second have one time:
	// in two logs, their order is the order of the logs given).
	cut := 1
	for lineTime(lines[cut]) == lineTime(lines[0]) {
		cut++
	}
	// The newer log given first: its lines are later than the older one's.
	if err := os.WriteFile(second, []byte(strings.Join(lines[cut:], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(first, []byte(strings.Join(lines[:cut], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	// Merged by time: the order of the files changes nothing, and the
	// verdicts are those of the one log.
	verdicts := func(logs ...string) []string {
		out := filepath.Join(dir, "verdicts.csv")
		_, errs, code := runCmd(t, append([]string{"replay", "-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-verdicts", out}, logs...)...)
		if code != exitOK {
			t.Fatalf("replay %v: code %d, %s", logs, code, errs)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var rows []string
		for _, row := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
			f := strings.Split(row, ",")
			rows = append(rows, strings.Join(f[2:], ",")) // time, key, verdict, policy
		}
		return rows
	}
	one := verdicts("testdata/access.log")
	if a, b := verdicts(second, first), verdicts(first, second); !slices.Equal(a, one) || !slices.Equal(b, one) {
		t.Errorf("merged verdicts differ from the one log's:\n%q\n%q\n%q", a, b, one)
	}
	out, _, _ := runCmd(t, "replay", "-config", "testdata/per-ip.yaml", "-policy", "per-ip", second, first)
	if strings.Contains(out, "earlier than") || !strings.Contains(out, "decided 162: refused 90") {
		t.Errorf("merged:\n%s", out)
	}
	// Within one log, a line earlier than one before it is noted.
	swapped := filepath.Join(dir, "swapped.log")
	if err := os.WriteFile(swapped, []byte(strings.Join(lines[cut:], "")+"\n"+strings.Join(lines[:cut], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, _ = runCmd(t, "replay", "-config", "testdata/per-ip.yaml", "-policy", "per-ip", swapped)
	if !strings.Contains(out, fmt.Sprintf("note: %d line(s) earlier than a line before them in their log", cut)) {
		t.Errorf("out of order within a log:\n%s", out)
	}
	// "-" reads standard input.
	in, err := os.Open("testdata/access.log")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	old := os.Stdin
	os.Stdin = in
	defer func() { os.Stdin = old }()
	out, _, code := runCmd(t, "replay", "-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-")
	if code != exitOK || !strings.Contains(out, "decided 162: refused 90") {
		t.Errorf("stdin: code %d\n%s", code, out)
	}
}

// lineTime is the time field of an nginx line.
func lineTime(line string) string {
	_, rest, _ := strings.Cut(line, "[")
	ts, _, _ := strings.Cut(rest, "]")
	return ts
}

func TestProgress(t *testing.T) {
	var buf strings.Builder
	if progressTo(&buf) != nil {
		t.Error("a progress bar on a buffer")
	}
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if progressTo(f) != nil {
		t.Error("a progress bar on a file")
	}
	p := &progress{w: &buf}
	p.start([]string{"testdata/access.log"})
	st, _ := os.Stat("testdata/access.log")
	for range 4 {
		p.add(int(st.Size() / 4))
	}
	p.done()
	if got := buf.String(); !strings.HasPrefix(got, "\r[==============================] 100% 4 lines, ") || !strings.HasSuffix(got, " lines/s \n") {
		t.Errorf("progress bar: %q", got)
	}
}

// A request costing more than a limit's capacity is refused by the
// middleware (429, cost_exceeds_limit): replay counts it refused, through a
// policy and through the rules, and the -max-refused gate sees it.
func TestReplayRefusesWhatNeverFits(t *testing.T) {
	log := filepath.Join(t.TempDir(), "cost.csv")
	if err := os.WriteFile(log, []byte("2026-12-04T09:00:00Z,a,1\n2026-12-04T09:00:00Z,a,50\n2026-12-04T09:00:00Z,a,50\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, route := range [][]string{{"-policy", "per-ip"}, {"-descriptor", "remote_address=$key"}} {
		args := append([]string{"replay", "-json", "-config", "testdata/per-ip.yaml", "-format", "csv"}, route...)
		out, errs, code := runCmd(t, append(args, log)...)
		var res replayResult
		decodeJSON(t, out, &res)
		if code != exitOK || res.Decided != 3 || res.Refused != 2 {
			t.Errorf("%v: code %d, decided %d, refused %d, want 0, 3, 2\n%s", route, code, res.Decided, res.Refused, errs)
		}
		if _, _, code := runCmd(t, append(append(args, "-max-refused", "0.01"), log)...); code != exitFindings {
			t.Errorf("%v -max-refused 0.01: code %d, want %d", route, code, exitFindings)
		}
	}
}

// A field the lines do not have (a typo in -key, -cost or -descriptor, a
// log_format without the default key) is a usage error naming it, not a
// replay in which every line lacks it.
func TestReplayUnknownField(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-policy", "per-ip", "-cost", "$nope", "testdata/access.log"}, "$nope: the log format has no such field"},
		{[]string{"-policy", "per-ip", "-key", "$nope", "testdata/access.log"}, "$nope: the log format has no such field"},
		{[]string{"-descriptor", "remote_address=$nope", "testdata/access.log"}, "$nope: the log format has no such field"},
		{[]string{"-policy", "per-ip", "-log-format", "$foo [$time_local]", "testdata/access.log"}, "$remote_addr: the log format has no such field"},
		{[]string{"-policy", "per-ip", "-format", "csv", "-key", "$client", "testdata/access.log"}, "$client: a CSV line (time,key[,cost]) has no such field"},
	} {
		_, errs, code := runCmd(t, append([]string{"replay", "-config", "testdata/per-ip.yaml"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", tc.args, code, errs, exitUsage, tc.want)
		}
	}
}
