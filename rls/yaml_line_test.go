package rls_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/rls"
)

// A YAML syntax error is reported at the line the parser names.
func TestYAMLErrorLine(t *testing.T) {
	body := "domain: edge\ndescriptors:\n" + strings.Repeat("  - key: k\n    value: v\n", 0)
	for i := range 11 {
		body += "  - key: k" + string(rune('a'+i)) + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	}
	body += "  - key: broken\n    rate_limit: {unit: second, requests_per_unit: 1\n  - key: after\n"
	_, err := rls.ParseDomain("edge.yaml", []byte(body))
	var ce *policy.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("%v, want a *policy.ConfigError", err)
	}
	if ce.Line < 25 {
		t.Errorf("%v: line %d, want the broken flow mapping's line (25 or after)", err, ce.Line)
	}
}

// is placed at the line that breaks the file.
func TestYAMLErrorLineOfEnclosingBlock(t *testing.T) {
	body := "domain: edge\ndescriptors:\n" + strings.Repeat("  - key: a\n    value: b\n", 11) + "  - key: x\n   value: y\n"
	_, err := rls.ParseDomain("edge.yaml", []byte(body))
	var ce *policy.ConfigError
	if !errors.As(err, &ce) || ce.Line != 26 || !strings.Contains(err.Error(), "edge.yaml:26:") {
		t.Errorf("%v, want edge.yaml:26 (the misindented line)", err)
	}
}

// Every error of a domain file names the line of what is wrong: yaml.v3's
// syntax errors (whose own line is the line before, or the enclosing
// block's) and each of the loader's own checks, at the field that breaks
// them rather than at the descriptor or limit holding it.
func TestDomainErrorLine(t *testing.T) {
	head := []string{"domain: edge", "descriptors:", "  - key: a", "    rate_limit: {unit: second, requests_per_unit: 1}"}
	h := func(ls ...string) string {
		return strings.Join(append(append([]string{}, head...), ls...), "\n") + "\n"
	}
	d := func(ls ...string) string { return h(append([]string{"  - key: b"}, ls...)...) }
	for _, tc := range []struct {
		name, yaml string
		line       int
		msg        string
	}{
		// Syntax: yaml.v3's line in the comment.
		{"unclosed flow mapping (5)", d("    rate_limit: {unit: second, requests_per_unit: 1", "  - key: c"), 6, "did not find expected ',' or '}'"},
		{"misindented field (5)", d("    rate_limit:", "      unit: second", "     requests_per_unit: 1"), 8, "did not find expected key"},
		{"tab indentation (5)", d("\tvalue: v"), 6, "found a tab character that violates indentation"},
		{"unterminated string (6)", d(`    value: "v`, "  - key: c"), 6, "found unexpected end of stream"},
		{"mapping value where not allowed (6)", d("    value: v: w"), 6, "mapping values are not allowed in this context"},
		// The loader's checks.
		{"unknown key", d("    valeu: v"), 6, "unknown key 'valeu'"},
		{"key twice", d("    value: v", "    value: w"), 7, "key 'value' appears twice"},
		{"not a bool", d("    shadow_mode: maybe"), 6, "expected true or false"},
		{"not a number", d("    rate_limit:", "      unit: second", "      requests_per_unit: lots"), 8, "not a whole number"},
		{"empty key", d("    value: v", `  - key: ""`, "    value: w"), 7, "descriptor has empty key"},
		{"duplicate descriptor", h("  - key: a"), 5, "duplicate descriptor composite key 'edge.a'"},
		{"share_threshold without wildcard", d("    value: v", "    share_threshold: true"), 7, "share_threshold can only be used with wildcard values"},
		{"bad unit", d("    rate_limit:", "      requests_per_unit: 1", "      unit: fortnight"), 8, "invalid rate limit unit 'fortnight'"},
		{"unit when unlimited", d("    rate_limit:", "      unlimited: true", "      unit: second"), 8, "should not specify rate limit unit when unlimited"},
		{"empty replaces entry", d("    rate_limit:", "      unit: second", "      requests_per_unit: 1", "      replaces:", "        - name: x", "        - name: ''"), 11, "should not have an empty replaces entry"},
		{"replaces itself", d("    rate_limit:", "      name: self", "      unit: second", "      requests_per_unit: 1", "      replaces:", "        - name: x", "        - name: self"), 12, "replaces should not contain name of same descriptor"},
		{"unknown algorithm", d("    rate_limit:", "      unit: second", "      requests_per_unit: 1", "      algorithm: token-buckets"), 9, "unknown algorithm"},
		{"burst on a window", d("    rate_limit:", "      unit: second", "      requests_per_unit: 1", "      burst: 5"), 9, "burst belongs to token-bucket and leaky-bucket"},
		{"bucket of 0", d("    rate_limit:", "      algorithm: token-bucket", "      requests_per_unit: 0", "      unit: second"), 8, "requests_per_unit must be at least 1"},
		{"burst too big", d("    rate_limit:", "      algorithm: token-bucket", "      unit: hour", "      requests_per_unit: 1", "      burst: 4000000000000"), 10, "overflows"},
		{"leased window", d("    rate_limit:", "      unit: second", "      requests_per_unit: 1", "      leased: true"), 9, "leased needs algorithm: token-bucket"},
		{"lease_refresh out of range", d("    rate_limit:", "      algorithm: token-bucket", "      unit: second", "      requests_per_unit: 1", "      leased: true", "      lease_refresh: 1m"), 11, "outside 1ms..10s"},
		{"rate_limits without rate_limit", d("    value: v", "    rate_limits:", "      - {unit: second, requests_per_unit: 1}"), 7, "rate_limits needs a rate_limit beside it"},
		{"unlimited with rate_limits", d("    rate_limit: {unlimited: true}", "    rate_limits:", "      - {unit: second, requests_per_unit: 1}"), 7, "an unlimited descriptor cannot have rate_limits"},
		{"named entry of rate_limits", d("    rate_limit: {unit: second, requests_per_unit: 1}", "    rate_limits:", "      - unit: minute", "        requests_per_unit: 10",
			"      - unit: hour", "        requests_per_unit: 100", "        name: hourly"), 12, "a limit of rate_limits cannot be unlimited, named or replace others"},
		{"unlimited entry of rate_limits", d("    rate_limit: {unit: second, requests_per_unit: 1}", "    rate_limits:", "      - requests_per_unit: 10", "        unlimited: true"), 9, "a limit of rate_limits cannot be unlimited"},
		{"replacing entry of rate_limits", d("    rate_limit: {unit: second, requests_per_unit: 1}", "    rate_limits:", "      - unit: minute", "        requests_per_unit: 10", "        replaces: [{name: x}]"), 10, "a limit of rate_limits cannot be unlimited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rls.ParseDomain("edge.yaml", []byte(tc.yaml))
			var ce *policy.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("%v, want a *policy.ConfigError", err)
			}
			want := "edge.yaml:" + strconv.Itoa(tc.line) + ": "
			if ce.Line != tc.line || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%v\nwant %s...%s", err, want, tc.msg)
			}
		})
	}
}
