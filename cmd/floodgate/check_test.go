package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The repository's own files.
var (
	plansYAML  = filepath.Join("..", "..", "examples", "plans", "limits.yaml")
	edgeYAML   = filepath.Join("..", "..", "rls", "testdata", "example", "edge.yaml")
	leasedYAML = filepath.Join("..", "..", "rls", "testdata", "leased", "edge.yaml")
)

func TestCheckRepositoryFiles(t *testing.T) {
	for _, f := range []string{plansYAML, edgeYAML, leasedYAML} {
		out, errs, code := runCmd(t, "check", "-json", f)
		if code != exitOK {
			t.Fatalf("check %s: code %d\n%s%s", f, code, out, errs)
		}
		var res checkResult
		decodeJSON(t, out, &res)
		if len(res.Files) != 1 || len(res.Errors) != 0 || len(res.Files[0].Limits) == 0 {
			t.Fatalf("check %s: %+v", f, res)
		}
	}
	// The plans file: 8 policies; per-ip in dry run, at its line.
	out, _, code := runCmd(t, "check", plansYAML)
	want := plansYAML + ":" + strconv.Itoa(lineOf(t, plansYAML, "name: per-ip")) + ": warning: per-ip is in dry run"
	if code != exitOK || !strings.Contains(out, want) || !strings.Contains(out, "1 file(s) loaded, 8 limit(s): 0 error(s), 1 warning(s)") {
		t.Errorf("check plans: code %d, want %q in\n%s", code, want, out)
	}
	// The Envoy example: the tenant's limit and its hourly one, by path.
	out, _, _ = runCmd(t, "check", "-json", edgeYAML)
	var res checkResult
	decodeJSON(t, out, &res)
	var names []string
	for _, l := range res.Files[0].Limits {
		names = append(names, l.Name)
	}
	if got := strings.Join(names, " "); got != "edge.destination_cluster_image-origin.prod edge.destination_cluster_image-origin.prod.source_service_purge-orchestrator edge.tenant edge.tenant#1" {
		t.Errorf("limits of %s: %s", edgeYAML, got)
	}
	if res.Files[0].Kind != kindEnvoy || res.Files[0].Limits[2].PerSec != 100 || res.Files[0].Limits[2].Capacity != 200 {
		t.Errorf("edge.tenant: %+v", res.Files[0].Limits[2])
	}
}

func TestCheckErrorsAtTheirLine(t *testing.T) {
	out, _, code := runCmd(t, "check", "testdata/bad.yaml", "testdata/bad-edge.yaml", plansYAML)
	if code != exitFindings {
		t.Errorf("code %d, want 1", code)
	}
	wantAll(t, out,
		`testdata/bad.yaml:6: rate "-100/s" is negative`,
		`testdata/bad-edge.yaml:5: invalid rate limit unit 'fortnight'`,
		"1 file(s) loaded, 8 limit(s): 2 error(s)",
	)
	// Two files of one domain, as the service refuses them.
	out, _, code = runCmd(t, "check", edgeYAML, leasedYAML)
	if code != exitFindings || !strings.Contains(out, leasedYAML+":1: duplicate domain 'edge'") {
		t.Errorf("duplicate domain: code %d\n%s", code, out)
	}
	// A file that cannot be read is an input error.
	_, errs, code := runCmd(t, "check", "testdata/no-such-file.yaml")
	if code != exitUsage || !strings.Contains(errs, "no-such-file.yaml") {
		t.Errorf("missing file: code %d, %q", code, errs)
	}
	if _, _, code := runCmd(t, "check"); code != exitUsage {
		t.Errorf("no file: code %d", code)
	}
}

func TestCheckWarnings(t *testing.T) {
	out, _, code := runCmd(t, "check", "-shared", "-json", "testdata/origin.yaml", "testdata/edge.yaml")
	if code != exitOK {
		t.Fatalf("code %d, want 0 (warnings only)\n%s", code, out)
	}
	var res checkResult
	decodeJSON(t, out, &res)
	got := map[string]string{}
	for _, w := range res.Warnings {
		got[w.Code+" "+w.File] += w.Msg + "|"
	}
	for key, want := range map[string]string{
		"dry-run testdata/origin.yaml":    "daily is in dry run",
		"unused testdata/origin.yaml":     `policy "bulk" is applied by no rule`,
		"burst-zero testdata/origin.yaml": "bulk has burst 0: a key's second request within 20ms is refused",
		"unnamed testdata/origin.yaml":    "no domain on a shared store",
		"burst-zero testdata/edge.yaml":   "edge-images.path_/upload has burst 0",
		"unnamed testdata/edge.yaml":      "edge-images.remote_address has no name",
		"edge-origin testdata/edge.yaml":  "edge limit edge-images.remote_address (20/s) is below 5x the tightest origin limit free (10/s, testdata/origin.yaml:5)",
	} {
		if !strings.Contains(got[key], want) {
			t.Errorf("%s: want %q, got %q", key, want, got[key])
		}
	}
	if strings.Contains(got["unnamed testdata/edge.yaml"], "uploads") {
		t.Errorf("the named limit was warned about: %s", got["unnamed testdata/edge.yaml"])
	}
	if len(res.Warnings) != 7 {
		t.Errorf("%d warnings, want 7: %+v", len(res.Warnings), res.Warnings)
	}
	// Without -shared no unnamed warning; with -strict warnings fail.
	out, _, _ = runCmd(t, "check", "testdata/origin.yaml", "testdata/edge.yaml")
	if strings.Contains(out, "[unnamed]") {
		t.Errorf("unnamed without -shared:\n%s", out)
	}
	if _, _, code := runCmd(t, "check", "-strict", "testdata/origin.yaml"); code != exitFindings {
		t.Errorf("-strict with warnings: code %d, want 1", code)
	}
	// A leased limit is on a shared store by construction.
	out, _, _ = runCmd(t, "check", leasedYAML)
	if !strings.Contains(out, leasedYAML+":9: warning: edge.destination_cluster_image-origin.prod has no name on a shared store") {
		t.Errorf("leased without a name:\n%s", out)
	}
	// Two rate_limits with one name, in one domain and across domains.
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, "domain: a\ndescriptors:\n  - key: route\n    rate_limit: {unit: second, requests_per_unit: 10, name: api}\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5, name: api}\n")
	writeFile(t, b, "domain: b\ndescriptors:\n  - key: route\n    rate_limit: {unit: second, requests_per_unit: 10, name: api}\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 10, name: tenant}\n")
	out, _, _ = runCmd(t, "check", a, b)
	for _, want := range []string{
		a + `:6: warning: a.user is named "api" like a.route (` + a + `:4)`,
		b + `:4: warning: b.route is named "api" like a.route (` + a + `:4)`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("same name: want %q in\n%s", want, out)
		}
	}
	if n := strings.Count(out, "[same-name]"); n != 2 {
		t.Errorf("%d same-name warnings, want 2:\n%s", n, out)
	}
	// An edge tighter than the origin's tightest limit.
	out, _, _ = runCmd(t, "check", plansYAML, edgeYAML)
	if !strings.Contains(out, "edge limit edge.tenant#1 (0.278/s) is tighter than the tightest origin limit free (10/s, "+plansYAML+":7)") {
		t.Errorf("edge tighter than origin:\n%s", out)
	}
}

func TestCheckDirectory(t *testing.T) {
	dir := filepath.Join("..", "..", "rls", "testdata", "example")
	out, _, code := runCmd(t, "check", dir)
	if code != exitOK || !strings.Contains(out, "1 file(s) loaded, 4 limit(s): 0 error(s)") {
		t.Errorf("check %s: code %d\n%s", dir, code, out)
	}
	if _, errs, code := runCmd(t, "check", t.TempDir()); code != exitUsage || !strings.Contains(errs, "no .yaml or .yml file") {
		t.Errorf("empty directory: code %d, %q", code, errs)
	}
}

func TestPolicyLine(t *testing.T) {
	text := []byte("policies:\n  - {name: free, rate: 10/s}\n  - name: \"freeze\"\n  - {name: fre, rate: 1/s}\n")
	for name, want := range map[string]int{"free": 2, "freeze": 3, "fre": 4, "nope": 1} {
		if got := policyLine(text, name); got != want {
			t.Errorf("policyLine(%q) = %d, want %d", name, got, want)
		}
	}
}

// lineOf is the number of the first line of file that contains s.
func lineOf(t *testing.T, file, s string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%s has no line with %q", file, s)
	return 0
}

// writeFile writes s to path or fails the test.
func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
