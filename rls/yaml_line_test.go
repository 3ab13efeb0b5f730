package rls_test

import (
	"errors"
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
