package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// runCmd runs the command line and returns its output and exit code.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestUsageAndHelp(t *testing.T) {
	if _, errs, code := runCmd(t); code != exitUsage || !strings.Contains(errs, "usage: floodgate") {
		t.Errorf("no arguments: code %d, stderr %q", code, errs)
	}
	if _, _, code := runCmd(t, "frobnicate"); code != exitUsage {
		t.Errorf("unknown command: code %d, want 2", code)
	}
	if out, _, code := runCmd(t, "version"); code != 0 || out != versionLine()+"\n" || !strings.HasPrefix(out, "floodgate ") {
		t.Errorf("version: %d %q", code, out)
	}
	for _, c := range []string{"check", "diff", "replay", "report"} {
		out, errs, code := runCmd(t, c, "-h")
		if code != exitOK || errs != "" || !strings.Contains(out, "usage: floodgate "+c) || !strings.Contains(out, "exit codes:") || !strings.Contains(out, "-json") {
			t.Errorf("%s -h: code %d, output %q", c, code, out)
		}
		if out, errs, code := runCmd(t, c, "-no-such-flag"); code != exitUsage || out != "" ||
			!strings.Contains(errs, "flag provided but not defined: -no-such-flag") || !strings.Contains(errs, "usage: floodgate "+c) {
			t.Errorf("%s -no-such-flag: code %d, want 2, stdout %q, stderr %q", c, code, out, errs)
		}
	}
	if out, _, code := runCmd(t, "help", "diff"); code != exitOK || !strings.Contains(out, "usage: floodgate diff") {
		t.Errorf("help diff: %d %q", code, out)
	}
}

// decodeJSON decodes a command's JSON output into v.
func decodeJSON(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("output is not the JSON expected: %v\n%s", err, out)
	}
}

// wantAll checks that out holds every one of wants.
func wantAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
}
