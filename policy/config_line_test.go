package policy_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/policy"
)

// lines numbers a config given one line per element.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

// Every error of a config file names the line of what is wrong: each class
// of syntax error yaml.v3's scanner and parser report (whose own line is
// the line before, the enclosing block's, or none), and each semantic error.
func TestConfigErrorLine(t *testing.T) {
	head := []string{"domain: api", "default_plan: free", "policies:", "  - {name: free, rate: 10/s}"}
	h := func(ls ...string) string { return lines(append(append([]string{}, head...), ls...)...) }
	for _, tc := range []struct {
		name, yaml string
		line       int
		msg        string
	}{
		// Syntax: yaml.v3's line in the comment.
		{"unclosed flow mapping (5)", h("  - {name: pro, rate: 100/s", "  - name: gold", "    rate: 1000/s"), 5, "did not find expected ',' or '}'"},
		{"unclosed flow mapping at the end (5)", h("  - {name: pro, rate: 100/s"), 5, "did not find expected ',' or '}'"},
		{"unclosed flow sequence (4)", h("rules: [{key: a, policy: free}", "overrides: {}"), 5, "did not find expected ',' or ']'"},
		{"missing ',' in a multi-line flow mapping (4)", h("  - {name: pro,", "     rate: 100/s", "     burst: 200}"), 6, "did not find expected ',' or '}'"},
		{"JSON missing ',' (1)", lines("{", `  "policies": [`, `    {"name": "a", "rate": "1/s"},`, `    {"name": "b", "rate": "2/s"}`, `    {"name": "c", "rate": "3/s"}`, "  ]", "}"), 4, "did not find expected ',' or ']'"},
		{"misindented field (3)", h("  - name: pro", "    rate: 100/s", "   burst: 200"), 7, "did not find expected '-' indicator"},
		{"misindented list entry (5)", h("  - name: pro", "    rate: 100/s", " - name: gold"), 7, "did not find expected key"},
		{"outdented key (5)", h("  - name: pro", " rate: 100/s"), 6, "did not find expected key"},
		{"list entry among keys (2)", h("  - name: pro", "    rate: 100/s", "    - burst: 5"), 7, "did not find expected key"},
		{"key among list entries (3)", lines("domain: api", "policies:", "  - {name: free, rate: 10/s}", "  rules: []"), 4, "did not find expected '-' indicator"},
		{"tab indentation in a block (5)", h("  - name: pro", "\trate: 100/s"), 6, "found a tab character that violates indentation"},
		{"tab starting a line (5)", lines("domain: api", "policies:", "  - {name: free, rate: 10/s}", "\tdomain: x"), 4, "found character that cannot start any token"},
		{"unterminated double-quoted string (5)", h(`  - {name: "pro, rate: 100/s}`, "rules: []"), 5, "found unexpected end of stream"},
		{"unterminated single-quoted string (5)", h(`  - name: 'pro`, "    rate: 100/s"), 5, "found unexpected end of stream"},
		{"mapping value where not allowed (5)", h("  - name: pro: gold"), 5, "mapping values are not allowed in this context"},
		{"mapping value after a plain scalar (5)", h("  - name: pro", "    rate: 100/s", "      burst: 5"), 7, "mapping values are not allowed in this context"},
		{"block entry where not allowed (5)", h("rules: - key: a"), 5, "block sequence entries are not allowed in this context"},
		{"key without ':' (5)", h("overrides", "rules: []"), 5, "could not find expected ':'"},
		{"key over 1024 characters (6)", h(strings.Repeat("k", 1100) + ": 1"), 5, "could not find expected ':'"},
		{"unknown escape (5)", h(`  - {name: "p\q", rate: 1/s}`), 5, "found unknown escape character"},
		{"stray ']' (4)", h("rules: ]"), 5, "did not find expected node content"},
		{"'-' inside a flow sequence (none)", lines("policies: [- {name: a, rate: 1/s}]"), 1, "did not find expected node content"},
		{"undefined tag handle (4)", h("  - {name: !x!y pro, rate: 1/s}"), 5, "found undefined tag handle"},
		{"anchor without a name (5)", h("  - {name: & pro, rate: 1/s}"), 5, "did not find expected alphabetic or numeric character"},
		{"character that cannot start a token (5)", h("  - {name: `pro`, rate: 1/s}"), 5, "found character that cannot start any token"},
		{"bad block scalar header (5)", h("  - name: |x", "      pro"), 5, "did not find expected comment or line break"},
		{"unknown alias (none)", h("  - {name: *pro, rate: 1/s}"), 5, "unknown anchor 'pro' referenced"},
		{"unknown directive (none)", lines("%FOO", "---", "policies: []"), 1, "found unknown directive name"},
		// Semantic errors.
		{"unknown field", h("  - name: pro", "    rate: 100/s", "    brust: 200"), 7, `unknown field "brust"`},
		{"field given twice", h("  - name: pro", "    rate: 100/s", "    rate: 200/s"), 7, `field "rate" given twice`},
		{"wrong type", h("  - name: pro", "    rate: [100/s]"), 6, "rate: want a string"},
		{"not an integer", h("  - name: pro", "    rate: 100/s", "    burst: lots"), 7, `burst: "lots" is not an integer`},
		{"not a bool", h("  - name: pro", "    rate: 100/s", "    dry_run: maybe"), 7, "dry_run: want true or false"},
		{"bad rate", h("  - name: pro", "    rate: 100/fortnight"), 6, "unknown unit"},
		{"negative rate", h("  - name: pro", "    rate: -100/s"), 6, "negative"},
		{"unknown algorithm", h("  - name: pro", "    algorithm: token-buckets", "    rate: 100/s"), 6, "unknown algorithm"},
		{"bad window", h("  - name: pro", "    algorithm: fixed-window", "    limit: 10", "    window: soon"), 8, "want a positive duration"},
		{"bad name", h("  - name: pro plan", "    rate: 100/s"), 5, `policy name "pro plan"`},
		{"no name", h("  - rate: 100/s"), 5, "a policy needs a name"},
		{"two policies of one name", h("  - name: free", "    rate: 100/s"), 5, `two policies are named "free" (the first at line 4)`},
		{"no rate", h("  - name: pro", "    burst: 5"), 5, "a token-bucket needs a rate"},
		{"limit on a bucket", h("  - name: pro", "    rate: 100/s", "    limit: 5"), 7, "limit and window belong to the window algorithms"},
		{"burst on a window", h("  - name: pro", "    algorithm: fixed-window", "    limit: 10", "    window: 1m", "    burst: 5"), 9, "rate and burst belong to the buckets"},
		{"delay on a token bucket", h("  - name: pro", "    rate: 100/s", "    delay: 5"), 7, "nodelay and delay belong to the leaky bucket"},
		{"delay above burst", h("  - name: pro", "    algorithm: leaky-bucket", "    rate: 100/s", "    burst: 2", "    delay: 5"), 9, "delay 5 is above burst 2"},
		{"burst overflow", h("  - name: pro", "    rate: 1/h", "    burst: 4000000000000"), 7, "overflows"},
		{"window limit zero", h("  - name: pro", "    algorithm: fixed-window", "    window: 1m", "    limit: 0"), 8, "window limit must be >= 1"},
		{"window too long", h("  - name: pro", "    algorithm: fixed-window", "    limit: 10", "    window: 1000000h"), 8, "above the maximum"},
		{"leased window", h("  - name: pro", "    algorithm: fixed-window", "    limit: 10", "    window: 1m", "    leased: true"), 9, "leased is for token-bucket policies"},
		{"lease_refresh out of range", h("  - name: pro", "    rate: 100/s", "    leased: true", "    lease_refresh: 1m"), 8, "outside 1ms..10s"},
		{"unknown default plan", lines("domain: api", "policies:", "  - {name: free, rate: 10/s}", "default_plan: gold"), 4, `default_plan names the unknown policy "gold"`},
		{"override of an unknown policy", h("overrides:", "  k1: free", "  k2: gold"), 7, `unknown policy "gold"`},
		{"rule of an unknown policy", h("rules:", "  - key: a", "    rules:", "      - key: b", "        policy: gold"), 8, `unknown policy "gold"`},
		{"rule limiting nothing", h("rules:", "  - key: a", "    policy: free", "  - key: b"), 8, "rule b limits nothing"},
		{"rule without key", h("rules:", "  - key: a", "    policy: free", "  - value: v", "    policy: free"), 8, "a rule needs a key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("limits.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error, want limits.yaml:%d: %s", tc.line, tc.msg)
			}
			want := "limits.yaml:" + strconv.Itoa(tc.line) + ": "
			if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%v\nwant %s...%s", err, want, tc.msg)
			}
		})
	}
}
