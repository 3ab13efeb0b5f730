package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo runs the scripted demo (a real server on 127.0.0.1:0, a real
// client, a real file watched for changes) and checks what it printed.
func TestDemo(t *testing.T) {
	t.Chdir("../..") // the demo reads examples/plans/limits.yaml
	var out bytes.Buffer
	if err := run([]string{"-demo"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	t.Log("\n" + text)
	admitted := func(label string) int {
		m := regexp.MustCompile(regexp.QuoteMeta(label) + `\s+(\d+) of`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no line %q", label)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	within := func(label string, lo, hi int) {
		if n := admitted(label); n < lo || n > hi {
			t.Errorf("%s admitted %d, want %d..%d", label, n, lo, hi)
		}
	}
	// The demo's clock stands still: each caller gets its plan's burst,
	// one second's worth.
	within("free API key (default plan):", 10, 10)
	within("pro API key (override):", 100, 100)
	within("purge-orchestrator token:", 500, 500)
	within("log-shipper token:", 50, 50)
	// A verified service without a rule of its own: other-service's budget.
	within("thumbnailer token (other-service):", 20, 20)
	// A token that is not one of the accepted ones (here, a service's
	// name, which the example once keyed by) is refused before any limit.
	within("a forged token:", 0, 0)
	// Just after the raise, the drained pro key is still drained (no
	// fresh burst). It then refills at the new rate from its first request
	// after the change, refused but converted: 200/s x 100 ms.
	within("pro API key, just after:", 0, 0)
	within("pro API key, refilled at 200/s:", 20, 20)
	if !strings.Contains(text, `changed [pro] [pro: token-bucket 100/s burst 100 -> token-bucket 200/s burst 200]`) {
		t.Error("the raise was not reported as a change of pro")
	}
	if !regexp.MustCompile(`config v2 kept: .*limits.yaml:\d+: rate "-10/s" is negative`).MatchString(text) {
		t.Error("the bad file was not reported with its file:line")
	}
	within("free API key, still served:", 5, 5)
}
