package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiffRefusesATighteningAbove30Percent(t *testing.T) {
	out, _, code := runCmd(t, "diff", plansYAML, "testdata/limits-tightened.yaml")
	if code != exitFindings {
		t.Errorf("code %d, want 1\n%s", code, out)
	}
	wantAll(t, out,
		"~ policy free: token-bucket 10/s burst 10 -> token-bucket 6/s burst 6 (tightened by 40%)\n    REFUSED",
		"~ policy pro: token-bucket 100/s burst 100 -> token-bucket 80/s burst 80 (tightened by 20%)\n-",
		"~ policy per-ip: token-bucket 200/s burst 200 (dry run) -> token-bucket 200/s burst 200 (starts enforcing",
		"- override key_pro_live_7: token-bucket 100/s burst 100 -> token-bucket 6/s burst 6 (tightened by 94%)\n    REFUSED",
		"4 change(s), 2 refused",
	)
	out, _, code = runCmd(t, "diff", "-force", "-json", plansYAML, "testdata/limits-tightened.yaml")
	if code != exitOK {
		t.Errorf("-force: code %d, want 0", code)
	}
	var res diffResult
	decodeJSON(t, out, &res)
	if res.Refused != 2 || !res.Forced || len(res.Changes) != 4 {
		t.Errorf("-force -json: %+v", res)
	}
	// Loosening is never refused; the same step back is.
	if _, _, code := runCmd(t, "diff", "testdata/limits-tightened.yaml", plansYAML); code != exitOK {
		t.Errorf("loosening: code %d, want 0", code)
	}
	// A larger allowed step lets the 40% through, not the 94%.
	out, _, _ = runCmd(t, "diff", "-max-step", "0.5", plansYAML, "testdata/limits-tightened.yaml")
	if !strings.Contains(out, "1 refused") {
		t.Errorf("-max-step 0.5:\n%s", out)
	}
}

func TestDiffPlansRulesAndEnvoy(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(plansYAML)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "default_plan: free", "default_plan: pro", 1)
	s = strings.Replace(s, "        policy: other-service\n", "        policy: log-shipper\n", 1)
	s = strings.Replace(s, "  key_pro_live_7: pro\n", "  key_pro_live_7: pro\n  key_new_9: free\n", 1)
	s = strings.Replace(s, "  key_acme_live_1: enterprise-acme\n", "  key_acme_live_1: pro\n", 1)
	newer := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(newer, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := runCmd(t, "diff", plansYAML, newer)
	wantAll(t, out,
		"~ default_plan: token-bucket 10/s burst 10 -> token-bucket 100/s burst 100\n",
		"~ override key_acme_live_1: token-bucket 1000/s burst 2000 -> token-bucket 100/s burst 100 (tightened by 95%)\n    REFUSED",
		"+ override key_new_9: token-bucket 10/s burst 10 -> token-bucket 10/s burst 10\n",
		"~ rule destination=image-origin > service: policy other-service -> policy log-shipper\n",
		"4 change(s), 1 refused",
	)
	if code != exitFindings {
		t.Errorf("code %d, want 1", code)
	}
	if out, _, code := runCmd(t, "diff", plansYAML, plansYAML); code != exitOK || !strings.Contains(out, "no change") {
		t.Errorf("same file: %d %q", code, out)
	}
	// Envoy configs: the tenant's limit cut from 100/s to 50/s.
	b, err = os.ReadFile(edgeYAML)
	if err != nil {
		t.Fatal(err)
	}
	s = strings.Replace(string(b), "requests_per_unit: 100\n", "requests_per_unit: 50\n", 1)
	newer = filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(newer, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCmd(t, "diff", edgeYAML, newer)
	if code != exitFindings || !strings.Contains(out, "~ limit edge.tenant: token-bucket 100 per second burst 200 -> token-bucket 50 per second burst 200 (tightened by 50%)") {
		t.Errorf("envoy diff: code %d\n%s", code, out)
	}
	// Two kinds, or a broken file.
	if _, _, code := runCmd(t, "diff", plansYAML, edgeYAML); code != exitUsage {
		t.Errorf("kinds differ: code %d, want 2", code)
	}
	if _, errs, code := runCmd(t, "diff", plansYAML, "testdata/bad.yaml"); code != exitFindings || !strings.Contains(errs, "testdata/bad.yaml:6:") {
		t.Errorf("bad new file: code %d, %q", code, errs)
	}
	if _, _, code := runCmd(t, "diff", plansYAML); code != exitUsage {
		t.Errorf("one file: code %d, want 2", code)
	}
}
