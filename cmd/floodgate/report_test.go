package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// recorded runs the plans of examples/plans for two minutes of simulated
// traffic on a recording store and returns the recorder.
func recorded(t *testing.T) *shadow.Recorder {
	t.Helper()
	clk := &testClock{}
	clk.ns.Store(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC).UnixNano())
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	mem, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	st, err := rec.Store(mem)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.LoadFile(plansYAML)
	if err != nil {
		t.Fatal(err)
	}
	live, err := policy.NewLive(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	rec.Follow(live)
	// 30 free keys at 1..30 a second, key_pro_live_7 at 150 a second.
	ctx := context.Background()
	for ms := range 120_000 {
		clk.ns.Add(int64(time.Millisecond))
		for k := range 30 {
			if ms%(1000/(k+1)) == 0 {
				if _, err := live.Take(ctx, "key_free_"+string(rune('a'+k)), 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		if ms%7 == 0 {
			if _, err := live.Take(ctx, "key_pro_live_7", 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	return rec
}

func TestReportFromARunningServiceAndAFile(t *testing.T) {
	rec := recorded(t)
	mux := http.NewServeMux()
	mux.Handle("/debug/floodgate/demand", rec.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	url := srv.URL + "/debug/floodgate/demand"

	out, errs, code := runCmd(t, "report", url)
	if code != exitOK {
		t.Fatalf("report %s: code %d, %s", url, code, errs)
	}
	want := rec.Reports()
	if len(want) != 2 {
		t.Fatalf("%d reports recorded, want free and pro", len(want))
	}
	for _, r := range want {
		for _, s := range []string{
			r.Policy + ": limit " + count(uint64(r.Limit)) + " per 1s\n",
			count(r.Decisions) + " decisions",
			"  recommendation: " + r.Recommendation.String() + "\n",
		} {
			if !strings.Contains(out, s) {
				t.Errorf("want %q in\n%s", s, out)
			}
		}
	}
	if !strings.Contains(out, "refused by key (heaviest keys):\n    key             refused") || !strings.Contains(out, "key_free_") {
		t.Errorf("no refused keys in\n%s", out)
	}

	// -json gives the recorder's reports, as the service serves them.
	js, _, code := runCmd(t, "report", "-json", url)
	var got []shadow.Report
	if err := json.Unmarshal([]byte(js), &got); err != nil || code != exitOK {
		t.Fatalf("report -json: %v, code %d", err, code)
	}
	wantJSON, _ := json.Marshal(want)
	var wantRound []shadow.Report
	if err := json.Unmarshal(wantJSON, &wantRound); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantRound) {
		t.Errorf("report -json differs from the recorder's reports:\n%s\n%s", js, wantJSON)
	}

	// The same from a saved file, and one policy only.
	saved := filepath.Join(t.TempDir(), "demand.json")
	if err := os.WriteFile(saved, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	if fromFile, _, code := runCmd(t, "report", saved); code != exitOK || fromFile != out {
		t.Errorf("report FILE (code %d) differs from report URL:\n%s", code, fromFile)
	}
	one, _, code := runCmd(t, "report", "-policy", "pro", url)
	if code != exitOK || !strings.HasPrefix(one, "pro: limit 100 per 1s\n") || strings.Contains(one, "free:") {
		t.Errorf("-policy pro: code %d\n%s", code, one)
	}

	// Errors: no such policy, a page that is not a report, no server.
	for _, args := range [][]string{
		{"-policy", "nope", url},
		{srv.URL + "/missing"},
		{"testdata/per-ip.yaml"},
		{"testdata/no-such-report.json"},
		{"-timeout", "1s", "http://127.0.0.1:1/"},
		{},
	} {
		if _, errs, code := runCmd(t, append([]string{"report"}, args...)...); code != exitUsage {
			t.Errorf("report %v: code %d, want 2 (%s)", args, code, errs)
		}
	}
}

func TestReportOfAReplay(t *testing.T) {
	js, _, code := runCmd(t, "replay", "-json", "-config", "testdata/per-ip.yaml", "-policy", "per-ip", "-min-observation", "1s", "testdata/access.log")
	if code != exitOK {
		t.Fatal(code)
	}
	saved := filepath.Join(t.TempDir(), "replay.json")
	if err := os.WriteFile(saved, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := runCmd(t, "report", saved)
	if code != exitOK || !strings.HasPrefix(out, "per-ip: limit 10 per 1s\n") || !strings.Contains(out, "203.0.113.7  90") {
		t.Errorf("report of a replay: code %d\n%s", code, out)
	}
}
