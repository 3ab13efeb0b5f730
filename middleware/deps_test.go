package middleware_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestTransportsKeepOffThePolicyPlane checks with go list that the HTTP
// and gRPC middlewares depend on the Matcher interface, not on the policy
// plane and what it pulls in: a service that limits by one limiter does not
// link a YAML parser, a file watcher or the lease machinery.
func TestTransportsKeepOffThePolicyPlane(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-deps", "./httplimit", "./grpclimit").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !slices.Contains(deps, "github.com/floodgate-go/floodgate/middleware") {
		t.Fatalf("go list gave %d packages, without this one: %q", len(deps), deps)
	}
	forbidden := []string{
		"github.com/floodgate-go/floodgate/policy",
		"github.com/floodgate-go/floodgate/lease",
		"github.com/floodgate-go/floodgate/store/memstore",
		"github.com/floodgate-go/floodgate/window",
		"github.com/floodgate-go/floodgate/leaky",
		"go.yaml.in/yaml/v3",
		"github.com/fsnotify/fsnotify",
	}
	for _, f := range forbidden {
		for _, d := range deps {
			if d == f || strings.HasPrefix(d, f+"/") || (strings.HasPrefix(f, "go.yaml.in/yaml") && strings.HasPrefix(d, "go.yaml.in/yaml")) {
				t.Errorf("httplimit or grpclimit depends on %s", d)
			}
		}
	}
}

// goTool is the go command of the toolchain running the tests.
func goTool(t *testing.T) string {
	t.Helper()
	g := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(g); err != nil {
		if g, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go command: %v", err)
		}
	}
	return g
}
