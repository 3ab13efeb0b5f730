package middleware_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// misuses are calls that must not compile: an option given to a
// constructor of another family.
var misuses = []string{
	`httplimit.Shed(acq, httplimit.WithCost(func(*http.Request) int { return 1 }))`,
	`httplimit.Shed(acq, httplimit.WithHeaderKey("X-Token"))`,
	`httplimit.Shed(acq, httplimit.WithDelayMode(middleware.DelayRefuse))`,
	`httplimit.Middleware(lim, httplimit.WithShedRetryAfter(time.Second))`,
	`httplimit.Middleware(lim, httplimit.WithDescriptor(httplimit.MethodEntry("m")))`,
	`httplimit.Policies(match, httplimit.WithHeaderKey("X-Token"))`,
	`httplimit.NewTransport(nil, httplimit.WithFailMode(middleware.FailClosed))`,
	`httplimit.Middleware(lim, httplimit.WithMaxAttempts(2))`,
	`grpclimit.Shed(acq, grpclimit.WithCost(func(context.Context, string) int { return 1 }))`,
	`grpclimit.Shed(acq, grpclimit.WithKeyPrefix("p"))`,
	`grpclimit.New(lim, grpclimit.WithShedRetryAfter(time.Second))`,
	`grpclimit.New(lim, grpclimit.WithClassFunc(grpclimit.HeaderClass("x", "a", "a")))`,
	`grpclimit.Policies(match, grpclimit.WithLimit(lim, nil))`,
	`grpclimit.NewClient(grpclimit.WithObserver(floodgate.ObserverFunc(nil)))`,
	`grpclimit.New(lim, grpclimit.WithPushback(true))`,
}

// fits are calls that must compile: each family with the options it shares.
var fits = []string{
	`httplimit.Middleware(lim, httplimit.WithName("n"), httplimit.WithCost(nil), httplimit.WithHeaderKey("X"), httplimit.WithFailMode(0))`,
	`httplimit.Policies(match, httplimit.WithName("n"), httplimit.WithCost(nil), httplimit.WithDescriptor(), httplimit.WithDryRun(true))`,
	`httplimit.Shed(acq, httplimit.WithName("n"), httplimit.WithShedRetryAfter(time.Second), httplimit.WithHeaders(0))`,
	`httplimit.NewTransport(nil, httplimit.WithMaxAttempts(2), httplimit.WithThrottle(nil))`,
	`grpclimit.New(lim, grpclimit.WithName("n"), grpclimit.WithCost(nil), grpclimit.WithKeyPrefix("p"), grpclimit.WithDelayMode(0))`,
	`grpclimit.Policies(match, grpclimit.WithName("n"), grpclimit.WithCost(nil), grpclimit.WithDescriptor(), grpclimit.WithIPPrefix(24, 48))`,
	`grpclimit.Shed(acq, grpclimit.WithName("n"), grpclimit.WithShedRetryAfter(time.Second), grpclimit.WithClassFunc(nil))`,
	`grpclimit.NewClient(grpclimit.WithCost(nil), grpclimit.WithPushback(true))`,
}

// program is a package calling each of calls on its own line; line(i) is
// the line of call i.
func program(calls []string) (src string, line func(int) int) {
	const head = `package zzoptions

import (
	"context"
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/middleware/grpclimit"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
)

var (
	_     context.Context
	_     http.Handler
	_     = time.Second
	lim   floodgate.Limiter
	acq   middleware.Acquirer
	match middleware.Matcher
)

func calls() {
`
	var b strings.Builder
	b.WriteString(head)
	for _, c := range calls {
		fmt.Fprintf(&b, "\t_, _ = %s\n", c)
	}
	b.WriteString("}\n")
	first := strings.Count(head, "\n") + 1
	return b.String(), func(i int) int { return first + i }
}

// build compiles src as a package of this module (through an overlay: the
// tree is not written), reporting every error.
func build(t *testing.T, src string) (string, error) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "calls.go")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(wd, "zzoptions", "calls.go")
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, []byte(fmt.Sprintf(`{"Replace":{%q:%q}}`, target, file)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(goTool(t), "build", "-gcflags=-e", "-overlay", overlay, "./zzoptions").CombinedOutput()
	return string(out), err
}

// TestOptionsAreCheckedByTheCompiler: each constructor of httplimit and
// grpclimit takes only the options of its family; any other does not
// compile (no run-time scope check is left to forget).
func TestOptionsAreCheckedByTheCompiler(t *testing.T) {
	src, _ := program(fits)
	if out, err := build(t, src); err != nil {
		t.Fatalf("the options that fit do not compile: %v\n%s", err, out)
	}
	src, line := program(misuses)
	out, err := build(t, src)
	if err == nil {
		t.Fatal("options given to the wrong constructor compiled")
	}
	for i, c := range misuses {
		if !strings.Contains(out, fmt.Sprintf("calls.go:%d:", line(i))) {
			t.Errorf("compiled: %s", c)
		}
	}
	if strings.Count(out, "does not implement") < len(misuses) {
		t.Errorf("want a \"does not implement\" error per misuse:\n%s", out)
	}
	if strings.Contains(out, "undefined") {
		t.Errorf("a misuse names what does not exist: it proves nothing:\n%s", out)
	}
}
