package shadowprom_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/shadow/shadowprom"
)

// The refusals of each heavy key are a counter labelled by the key's hash,
// the report's Key.Hash: never the key, and only for keys refused.
func TestTopKeyRefused(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	rec, err := shadow.New(shadow.Config{Clock: floodgate.ClockFunc(func() time.Time { return now }), MinObservation: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 50)
	if err != nil {
		t.Fatal(err)
	}
	// key7 refused twice a window for three windows, key8 once, the rest never.
	for w := range 3 {
		now = t0.Add(time.Duration(w) * time.Second)
		for k := range 10 {
			d.Observe(fmt.Sprint("token-", k), 10, k == 7 || k == 8)
			if k == 7 {
				d.Observe(fmt.Sprint("token-", k), 10, true)
			}
		}
	}
	now = t0.Add(3 * time.Second)
	want := map[string]float64{}
	for _, k := range d.Report().Top {
		switch k.Key {
		case "token-7":
			want[k.Hash] = 6
		case "token-8":
			want[k.Hash] = 3
		}
	}
	if len(want) != 2 {
		t.Fatalf("the report's top-K misses the refused keys: %+v", d.Report().Top)
	}

	reg := prometheus.NewRegistry()
	if err := shadowprom.Register(reg, rec); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_shadow_top_key_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["policy"] != "api" || len(labels) != 2 {
				t.Errorf("labels %v, want policy=api and key_hash", labels)
			}
			got[labels["key_hash"]] = m.GetCounter().GetValue()
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("floodgate_shadow_top_key_refused_total by key_hash = %v, want %v", got, want)
	}
	problems, err := testutil.GatherAndLint(reg, "floodgate_shadow_top_key_refused_total")
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
}
