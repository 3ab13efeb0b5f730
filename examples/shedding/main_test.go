package main

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestShortRun runs the program briefly and checks its summary and chart.
func TestShortRun(t *testing.T) {
	out := filepath.Join(t.TempDir(), "chart", "shedding.svg")
	var buf bytes.Buffer
	if err := run([]string{"-short", "-out", out}, &buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	t.Log("\n" + text)
	for _, want := range []string{"phase", "before", "spike", "after", "critical ok", "best-effort ok", "chart written to " + out} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	// The spike row: critical is served best, best-effort worst.
	m := regexp.MustCompile(`(?m)^spike\s+\S+\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no spike row in the summary")
	}
	crit, std, be := num(t, m[1]), num(t, m[2]), num(t, m[3])
	if !(crit > std && std > be) || crit < 90 {
		t.Errorf("spike success critical %v, standard %v, best-effort %v: want critical >= 90 and ordered", crit, std, be)
	}
	if !strings.Contains(text, "best-effort was served in full again") {
		t.Errorf("best-effort did not recover")
	}

	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName   xml.Name   `xml:"svg"`
		Polylines []struct{} `xml:"polyline"`
		Texts     []string   `xml:"text"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the chart is not well-formed SVG: %v", err)
	}
	// 4 panels: offered (3 classes + capacity), served (3 + capacity),
	// limit/in-flight/workers, p99 (3, with gaps where a class got nothing
	// served, so possibly in several pieces).
	if len(doc.Polylines) < 14 {
		t.Errorf("%d polylines, want at least 14", len(doc.Polylines))
	}
	all := strings.Join(doc.Texts, "|")
	for _, want := range []string{"Offered load per class", "p99 latency per class", "limit", "in flight", "critical", "standard", "best-effort"} {
		if !strings.Contains(all, want) {
			t.Errorf("chart lacks the label %q", want)
		}
	}
}

func TestBadFlags(t *testing.T) {
	var buf bytes.Buffer
	if err := run([]string{"-alg", "nope", "-out", filepath.Join(t.TempDir(), "x.svg")}, &buf); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
	if err := run([]string{"-bogus"}, &buf); err == nil {
		t.Fatal("unknown flag accepted")
	}
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
