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

// TestReferenceFormat checks and diffs a config in envoyproxy/ratelimit's
// own format, with none of floodgate's extensions.
func TestReferenceFormat(t *testing.T) {
	out, _, code := runCmd(t, "check", "-json", "testdata/messaging.yaml")
	var res checkResult
	decodeJSON(t, out, &res)
	if code != exitOK || len(res.Errors) != 0 || len(res.Files[0].Limits) != 7 {
		t.Fatalf("check: code %d, %+v", code, res)
	}
	if w := res.Warnings; len(w) != 1 || w[0].Code != "dry-run" || w[0].Line != 36 || !strings.Contains(w[0].Msg, "messaging.client_trial") {
		t.Errorf("warnings: %+v", w)
	}
	for _, l := range res.Files[0].Limits {
		if l.Name == "messaging.remote_address_10.0.0.1" {
			t.Errorf("an unlimited descriptor listed as a limit: %+v", l)
		}
		if l.Name == "messaging.plan_enterprise" && (l.Desc != "fixed-window 10000 per 2 x hour" || l.Capacity != 10000) {
			t.Errorf("plan_enterprise: %+v", l)
		}
	}
	b, err := os.ReadFile("testdata/messaging.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "requests_per_unit: 60\n", "requests_per_unit: 30\n", 1)
	s = strings.Replace(s, "unit_multiplier: 2\n", "unit_multiplier: 1\n", 1)
	newer := filepath.Join(t.TempDir(), "messaging.yaml")
	if err := os.WriteFile(newer, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCmd(t, "diff", "testdata/messaging.yaml", newer)
	wantAll(t, out,
		"~ limit messaging.plan_enterprise: fixed-window 10000 per 2 x hour -> fixed-window 10000 per hour\n",
		"~ limit messaging.remote_address: fixed-window 60 per minute -> fixed-window 30 per minute (tightened by 50%)\n    REFUSED",
		"2 change(s), 1 refused",
	)
	if code != exitFindings {
		t.Errorf("code %d, want 1", code)
	}
}
