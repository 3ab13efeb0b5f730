package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/credkey"
	"github.com/floodgate-go/floodgate/internal/yamlline"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// ConfigError is an error in a config file, at a line.
type ConfigError struct {
	File string
	// Line is the line of what is wrong: for a YAML syntax error, the line
	// where the text stops being YAML (an unclosed '{', a missing ',', a
	// misindented key, the opening quote of an unterminated string), not
	// yaml.v3's line, which is often the enclosing block's or the one
	// before; for any other error, the line of the field at fault, else of
	// the entry (policy, rule, override) that holds it.
	Line int
	Msg  string
}

// Error returns "file:line: msg".
func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// Unwrap returns [floodgate.ErrInvalidConfig].
func (e *ConfigError) Unwrap() error { return floodgate.ErrInvalidConfig }

// LoadFile reads a config file (YAML, or JSON, which is YAML too) and checks
// it. Every error in the file is a [*ConfigError] with the file and the
// line of what is wrong (an error reading the file is returned as it is): a syntax error, an unknown field, a bad value, a negative rate, two
// policies of one name, an override or rule naming an unknown policy.
func LoadFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("policy: %w", err)
	}
	return Parse(path, b)
}

// Parse reads a config from b; name is the file name used in errors. See
// [LoadFile] for the format.
func Parse(name string, b []byte) (Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		line, msg := yamlline.Locate(b, err)
		return Config{}, &ConfigError{File: name, Line: line, Msg: msg}
	}
	p := parser{file: name}
	if len(doc.Content) == 0 {
		return Config{}, &ConfigError{File: name, Line: 1, Msg: "empty config: want at least policies"}
	}
	cfg, err := p.config(doc.Content[0])
	if err != nil {
		return Config{}, err
	}
	// Semantic checks, each placed at the line that caused it (store
	// limiters only: whether the store grants leases is NewLive's check).
	if _, err := compile(cfg, nopStore{}, nil, credkey.New(nil, "cred#"), nil); err != nil {
		return Config{}, p.place(err)
	}
	return cfg, nil
}

type parser struct {
	file string
	// lines of what the semantic checks may complain about.
	policyLine   map[string]int
	overrideLine map[string]int
	ruleLine     map[string]int
	defaultLine  int
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) error {
	return &ConfigError{File: p.file, Line: n.Line, Msg: fmt.Sprintf(format, args...)}
}

// fields walks a mapping, calling f for each key; unknown keys are errors.
func (p *parser) fields(n *yaml.Node, what string, known []string, f func(key string, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n, "%s: want a mapping", what)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !contains(known, k.Value) {
			return p.errf(k, "%s: unknown field %q (known: %s)", what, k.Value, strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return p.errf(k, "%s: field %q given twice", what, k.Value)
		}
		seen[k.Value] = true
		if err := f(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) str(n *yaml.Node, what string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", p.errf(n, "%s: want a string", what)
	}
	return n.Value, nil
}

func (p *parser) int(n *yaml.Node, what string) (int64, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, p.errf(n, "%s: want an integer", what)
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, p.errf(n, "%s: %q is not an integer", what, n.Value)
	}
	if v < 0 {
		return 0, p.errf(n, "%s: %d is negative", what, v)
	}
	return v, nil
}

func (p *parser) bool(n *yaml.Node, what string) (bool, error) {
	if n.Kind != yaml.ScalarNode || (n.Value != "true" && n.Value != "false") {
		return false, p.errf(n, "%s: want true or false", what)
	}
	return n.Value == "true", nil
}

func (p *parser) config(n *yaml.Node) (Config, error) {
	var cfg Config
	p.policyLine, p.overrideLine, p.ruleLine = map[string]int{}, map[string]int{}, map[string]int{}
	err := p.fields(n, "config", []string{"domain", "default_plan", "policies", "overrides", "rules"}, func(k string, v *yaml.Node) error {
		var err error
		switch k {
		case "domain":
			cfg.Domain, err = p.str(v, "domain")
		case "default_plan":
			p.defaultLine = v.Line
			cfg.DefaultPlan, err = p.str(v, "default_plan")
		case "policies":
			if v.Kind != yaml.SequenceNode {
				return p.errf(v, "policies: want a list")
			}
			for _, e := range v.Content {
				pol, err := p.policy(e)
				if err != nil {
					return err
				}
				if _, dup := p.policyLine[pol.Name]; dup {
					return p.errf(e, "two policies are named %q (the first at line %d)", pol.Name, p.policyLine[pol.Name])
				}
				p.policyLine[pol.Name] = e.Line
				cfg.Policies = append(cfg.Policies, pol)
			}
		case "overrides":
			if v.Kind != yaml.MappingNode {
				return p.errf(v, "overrides: want a mapping of keys to policy names")
			}
			cfg.Overrides = map[string]string{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				key, val := v.Content[i], v.Content[i+1]
				name, err := p.str(val, "override of "+key.Value)
				if err != nil {
					return err
				}
				if _, dup := cfg.Overrides[key.Value]; dup {
					return p.errf(key, "override of %q given twice", key.Value)
				}
				cfg.Overrides[key.Value] = name
				p.overrideLine[key.Value] = val.Line
			}
		case "rules":
			cfg.Rules, err = p.rules(v, "")
		}
		return err
	})
	return cfg, err
}

func (p *parser) policy(n *yaml.Node) (Policy, error) {
	var pol Policy
	known := []string{"name", "algorithm", "rate", "burst", "nodelay", "delay", "limit", "window", "dry_run", "leased", "lease_refresh"}
	lines := map[string]int{} // of each field given, where its errors point
	err := p.fields(n, "policy", known, func(k string, v *yaml.Node) error {
		lines[k] = v.Line
		return p.policyField(&pol, k, v)
	})
	if err != nil {
		return pol, err
	}
	if pol.Name == "" {
		return pol, p.errf(n, "a policy needs a name")
	}
	if err := pol.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), floodgate.ErrInvalidConfig.Error()+": ")
		at := n
		if l := fieldLine(msg, lines); l != 0 {
			at = &yaml.Node{Line: l}
		}
		return pol, p.errf(at, "%s", msg)
	}
	return pol, nil
}

// policyField reads the field k of a policy into pol.
func (p *parser) policyField(pol *Policy, k string, v *yaml.Node) error {
	var err error
	switch k {
	case "name":
		pol.Name, err = p.str(v, "name")
	case "algorithm":
		pol.Algorithm, err = p.kind(v)
	case "rate":
		pol.Rate, err = p.rate(v)
	case "burst":
		pol.Burst, err = p.int(v, "burst")
	case "nodelay":
		pol.NoDelay, err = p.bool(v, "nodelay")
	case "delay":
		pol.Delay, err = p.int(v, "delay")
	case "limit":
		pol.Limit, err = p.int(v, "limit")
	case "window":
		pol.Window, err = p.duration(v, "window", "1s, 1m, 24h")
	case "dry_run":
		pol.DryRun, err = p.bool(v, "dry_run")
	case "leased":
		pol.Leased, err = p.bool(v, "leased")
	case "lease_refresh":
		pol.LeaseRefresh, err = p.duration(v, "lease_refresh", "100ms")
	}
	return err
}

// kind reads a policy's algorithm.
func (p *parser) kind(v *yaml.Node) (Kind, error) {
	s, err := p.str(v, "algorithm")
	if err != nil {
		return "", err
	}
	switch k := Kind(s); k {
	case TokenBucket, LeakyBucket, FixedWindow, SlidingLog, SlidingCounter:
		return k, nil
	}
	return "", p.errf(v, "unknown algorithm %q (want token-bucket, leaky-bucket, fixed-window, sliding-log or sliding-counter)", s)
}

// rate reads a policy's rate.
func (p *parser) rate(v *yaml.Node) (floodgate.Rate, error) {
	s, err := p.str(v, "rate")
	if err != nil {
		return floodgate.Rate{}, err
	}
	if strings.HasPrefix(strings.TrimSpace(s), "-") {
		return floodgate.Rate{}, p.errf(v, "rate %q is negative", s)
	}
	r, err := parseRate(s)
	if err != nil {
		return floodgate.Rate{}, p.errf(v, "%v", strings.TrimPrefix(err.Error(), floodgate.ErrInvalidConfig.Error()+": "))
	}
	return r, nil
}

// duration reads the positive duration of field name; example is what the
// error suggests.
func (p *parser) duration(v *yaml.Node, name, example string) (time.Duration, error) {
	s, err := p.str(v, name)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, p.errf(v, "%s %q: want a positive duration such as %s", name, s, example)
	}
	return d, nil
}

// blame lists, for the errors of Policy.Validate that one field or two
// cause, a part of the message and the fields to blame, in order. An
// error naming no field (a missing rate, limit or window) is placed at
// the policy.
var blame = []struct {
	says   string
	fields []string
}{
	{"lease_refresh", []string{"lease_refresh"}},
	{"leased is for", []string{"leased"}},
	{"limit and window belong", []string{"limit", "window"}},
	{"rate and burst belong", []string{"rate", "burst"}},
	{"nodelay and delay belong", []string{"nodelay", "delay"}},
	{"NoDelay and Delay", []string{"delay", "nodelay"}},
	{"delay", []string{"delay"}},
	{"burst", []string{"burst"}},
	{"bucket rate", []string{"rate"}},
	{"window limit", []string{"limit"}},
	{"log limit", []string{"limit"}},
	{"counter limit", []string{"limit", "window"}},
	{"window", []string{"window"}},
}

// fieldLine returns the line of the field that msg, an error of
// Policy.Validate, blames (0: none of lines, the fields given).
func fieldLine(msg string, lines map[string]int) int {
	if strings.Contains(msg, " needs a ") {
		return 0
	}
	for _, b := range blame {
		if !strings.Contains(msg, b.says) {
			continue
		}
		for _, f := range b.fields {
			if l := lines[f]; l != 0 {
				return l
			}
		}
	}
	return 0
}

func (p *parser) rules(n *yaml.Node, path string) ([]Rule, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, "rules: want a list")
	}
	var out []Rule
	for _, e := range n.Content {
		r, err := p.rule(e, path)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// rule reads the rule e, at path in the tree, and its nested rules.
func (p *parser) rule(e *yaml.Node, path string) (Rule, error) {
	var r Rule
	var kids *yaml.Node
	err := p.fields(e, "rule", []string{"key", "value", "policy", "plan", "rules"}, func(k string, v *yaml.Node) error {
		var err error
		switch k {
		case "key":
			r.Key, err = p.str(v, "key")
		case "value":
			r.Value, err = p.str(v, "value")
		case "policy":
			r.Policy, err = p.str(v, "policy")
		case "plan":
			r.Plan, err = p.bool(v, "plan")
		case "rules":
			kids = v
		}
		return err
	})
	if err != nil {
		return r, err
	}
	if r.Key == "" {
		return r, p.errf(e, "a rule needs a key")
	}
	at := path + r.Key
	if r.Value != "" {
		at += "=" + r.Value
	}
	p.ruleLine[at] = e.Line
	if kids != nil {
		if r.Rules, err = p.rules(kids, at+" > "); err != nil {
			return r, err
		}
	}
	if r.Policy == "" && !r.Plan && len(r.Rules) == 0 {
		return r, p.errf(e, "rule %s limits nothing: give it a policy, plan: true, or nested rules", at)
	}
	return r, nil
}

// place turns a semantic error of compile into a ConfigError at the line of
// what it names.
func (p *parser) place(err error) error {
	msg := strings.TrimPrefix(err.Error(), floodgate.ErrInvalidConfig.Error()+": ")
	line := 1
	switch {
	case strings.HasPrefix(msg, "default_plan"):
		line = p.defaultLine
	case strings.HasPrefix(msg, "the override of "):
		for k, l := range p.overrideLine {
			if strings.HasPrefix(msg, fmt.Sprintf("the override of %q", k)) {
				line = l
			}
		}
	case strings.HasPrefix(msg, "rule "):
		best := ""
		for at, l := range p.ruleLine {
			if strings.HasPrefix(msg, "rule "+at+" ") && len(at) > len(best) {
				best, line = at, l
			}
		}
	case strings.HasPrefix(msg, "policy "):
		for name, l := range p.policyLine {
			if strings.HasPrefix(msg, fmt.Sprintf("policy %q", name)) {
				line = l
			}
		}
	}
	return &ConfigError{File: p.file, Line: line, Msg: msg}
}

// nopStore lets Parse compile a config to check it without a real store:
// it is never asked to decide.
type nopStore struct{}

var errNopStore = errors.New("policy: config check store")

func (nopStore) Apply(context.Context, string, algo.Algorithm, int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, errNopStore
}

func (nopStore) ApplyAll(context.Context, []store.Op, []floodgate.Decision, bool) (bool, error) {
	return false, errNopStore
}
