package rls_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/rls"
)

// current_limit and duration_until_reset speak in whole seconds.
func TestUnitNotWholeSeconds(t *testing.T) {
	for _, u := range []string{"1500ms", "0.5s", "2s500ms"} {
		_, err := rls.ParseDomain("u.yaml", []byte("domain: u\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n      unit: "+u+"\n"))
		var ce *policy.ConfigError
		if !errors.As(err, &ce) || ce.Line != 6 || !strings.Contains(err.Error(), "whole number of seconds") {
			t.Errorf("unit %s: %v, want u.yaml:6 ... whole number of seconds", u, err)
		}
	}
	if _, err := rls.ParseDomain("u.yaml", []byte("domain: u\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1, unit: 90s}\n")); err != nil {
		t.Errorf("unit 90s: %v", err)
	}
}
