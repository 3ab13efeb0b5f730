package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo runs the program's -demo mode (a real server on 127.0.0.1:0 and a
// real client) and checks what the client saw.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-demo"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []struct {
		status string
		member string // the route policy's RateLimit member, "" for none
	}{
		{"200", ""},
		{"200", `"search";r=1;`},
		{"200", `"search";r=0;`},
		{"429", `"search";r=0;`},
		{"200", `"per-service";r=2;`},
		{"200", `"per-service";r=1;`},
		{"200", `"per-service";r=0;`},
		{"429", `"per-service";r=0;`},
		{"200", `"per-service";r=2;`}, // another service has its own budget
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	retry := regexp.MustCompile(`Retry-After: (\d+)`)
	perIP := regexp.MustCompile(`"per-ip";r=(\d+)`)
	for i := 1; i+1 < len(lines); i++ {
		// A request one limit refuses is charged to none: the next
		// request finds the per-IP budget charged once since the one
		// before the refusal.
		if want[i].status == "429" {
			before, after := perIP.FindStringSubmatch(lines[i-1]), perIP.FindStringSubmatch(lines[i+1])
			if before == nil || after == nil {
				t.Fatalf("line %d: no per-ip member around the refusal: %s / %s", i, lines[i-1], lines[i+1])
			}
			if b, a := atoi(t, before[1]), atoi(t, after[1]); a < b-1 {
				t.Errorf("line %d: a refusal charged the per-IP budget: %s / %s", i, lines[i-1], lines[i+1])
			}
		}
	}
	for i, w := range want {
		l := lines[i]
		if !strings.Contains(l, "-> "+w.status+" ") {
			t.Errorf("line %d: want status %s: %s", i, w.status, l)
		}
		// A refusal's RateLimit holds only the refusing limit's member.
		if strings.Contains(l, `"per-ip";r=`) == (w.status == "429") || (w.member != "" && !strings.Contains(l, w.member)) {
			t.Errorf("line %d: want per-ip (unless refused) and %s: %s", i, w.member, l)
		}
		m := retry.FindStringSubmatch(l)
		if (m != nil) != (w.status == "429") {
			t.Errorf("line %d: Retry-After present %v: %s", i, m != nil, l)
		}
		if m != nil {
			if n, _ := strconv.Atoi(m[1]); n < 1 {
				t.Errorf("line %d: Retry-After %s < 1", i, m[1])
			}
		}
		if strings.Contains(l, "/internal/") && !strings.Contains(l, "X-RateLimit-Scope: route+header") {
			t.Errorf("line %d: internal route not keyed by the service token: %s", i, l)
		}
	}
}

func TestBadFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-nope"}, &out); err == nil {
		t.Fatal("unknown flag accepted")
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
