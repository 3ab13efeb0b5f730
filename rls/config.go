package rls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate/internal/yamlline"
	"github.com/floodgate-go/floodgate/policy"
)

// Config is a set of domains, each from one file in the format of
// envoyproxy/ratelimit (see the package documentation for the fields).
type Config struct {
	Domains []Domain
}

// Domain is one config file: a domain and its descriptors.
type Domain struct {
	// Name is the domain, as Envoy's rate limit filter sends it.
	Name string
	// File is the file the domain was read from ("" for a config built in
	// code).
	File string
	// Descriptors are the top-level descriptors.
	Descriptors []Descriptor
}

// Descriptor is one level of a domain's descriptor tree: a key, an optional
// value (a trailing '*' makes it a prefix), the limit of the requests whose
// descriptor ends here, and the nested descriptors.
type Descriptor struct {
	Key   string
	Value string
	// RateLimit is the descriptor's limit (nil: none at this level).
	RateLimit *RateLimit
	// RateLimits are further limits checked with RateLimit, all or
	// nothing (a floodgate extension).
	RateLimits []RateLimit
	// ShadowMode decides and counts but never refuses.
	ShadowMode bool
	// QuotaMode: see the package documentation.
	QuotaMode bool
	// DetailedMetric labels the metrics with the request's values.
	DetailedMetric bool
	// Credential marks the entry's value as a credential (an API key, a
	// token; a floodgate extension): the store key holds a keyed hash of
	// it, and metrics and events never show it.
	Credential bool
	// ValueToMetric puts the request's value of this entry in the metric
	// key (where the config has a wildcard or no value).
	ValueToMetric bool
	// ShareThreshold makes every value matching this wildcard value share
	// one counter (the store key holds the pattern, not the value).
	ShareThreshold bool
	// Descriptors are the nested descriptors.
	Descriptors []Descriptor
	// Line is the line of the descriptor in its file.
	Line int
	// lines holds the line of each field the file gives (nil for a
	// Descriptor built in code).
	lines map[string]int
}

// composite returns d's key and value as the reference joins them.
func (d Descriptor) composite() string {
	if d.Value == "" {
		return d.Key
	}
	return d.Key + "_" + d.Value
}

// lineOf returns the line of d's field f, else d's line.
func (d Descriptor) lineOf(f string) int {
	if l := d.lines[f]; l != 0 {
		return l
	}
	return d.Line
}

// RateLimit is a limit: requests_per_unit per unit, as the reference
// writes it, with floodgate's extensions (Algorithm, Burst, a unit that is
// a duration).
type RateLimit struct {
	RequestsPerUnit uint32
	// Unit is "second", "minute", "hour", "day", "week", "month" (30
	// days) or "year" (365 days), case-insensitive, or (an extension) a
	// duration such as "30s" or "5m", a whole number of seconds.
	Unit string
	// UnitMultiplier multiplies the unit (0 means 1).
	UnitMultiplier uint32
	Unlimited      bool
	Name           string
	Replaces       []string
	// Algorithm is one of policy's algorithm names; "" is fixed-window,
	// the reference's.
	Algorithm policy.Kind
	// Burst is a token bucket's capacity (default requests_per_unit) or a
	// leaky bucket's burst (default 0).
	Burst int64
	// Leased decides a token-bucket limit on tokens leased from its one
	// global bucket (policy.Policy.Leased): on a store that grants leases
	// (redisstore) only.
	Leased bool
	// LeaseRefresh is a leased limit's refresh period (1ms..10s; 0 means
	// 100ms).
	LeaseRefresh time.Duration
	// Line is the line of the rate limit in its file.
	Line int
	// lines holds the line of each field the file gives (nil for a
	// RateLimit built in code); replaceLines the line of each replaces
	// entry.
	lines        map[string]int
	replaceLines []int
}

// lineOf returns the line of r's field f, else r's line.
func (r RateLimit) lineOf(f string) int {
	if l := r.lines[f]; l != 0 {
		return l
	}
	return r.Line
}

// extra returns the first field of r that only a rate_limit may have
// (unlimited, name, replaces), "" when r has none.
func (r RateLimit) extra() string {
	switch {
	case r.Unlimited:
		return "unlimited"
	case r.Name != "":
		return "name"
	case len(r.Replaces) > 0:
		return "replaces"
	}
	return ""
}

// errLine is the line where err, an error of r's policy, points: the
// line of the field it blames when the file gives it, else r's line (0
// for a RateLimit built in code).
func (r RateLimit) errLine(err error) int {
	var fe *fieldError
	if errors.As(err, &fe) {
		for _, f := range fe.fields {
			if l := r.lines[f]; l != 0 {
				return l
			}
		}
	}
	return r.Line
}

// Window returns the limit's window: its unit times its multiplier.
func (r RateLimit) Window() (time.Duration, error) {
	var d time.Duration
	switch strings.ToLower(r.Unit) {
	case "second":
		d = time.Second
	case "minute":
		d = time.Minute
	case "hour":
		d = time.Hour
	case "day":
		d = 24 * time.Hour
	case "week":
		d = 7 * 24 * time.Hour
	case "month":
		d = 30 * 24 * time.Hour
	case "year":
		d = 365 * 24 * time.Hour
	default:
		v, err := time.ParseDuration(r.Unit)
		if err != nil || v <= 0 {
			return 0, fmt.Errorf("invalid rate limit unit '%s' (want second, minute, hour, day, week, month, year or a duration such as 30s)", r.Unit)
		}
		if v%time.Second != 0 {
			// current_limit and duration_until_reset speak in whole seconds.
			return 0, fmt.Errorf("invalid rate limit unit '%s': a duration unit must be a whole number of seconds (such as 2s or 90s)", r.Unit)
		}
		d = v
	}
	if r.UnitMultiplier > 1 {
		d *= time.Duration(r.UnitMultiplier)
	}
	return d, nil
}

// LoadDir reads every .yaml and .yml file of dir (not its subdirectories),
// in name order, as the reference's runtime directory. Every error in a file
// is a *policy.ConfigError with the file and line; two files of one domain
// are an error.
func LoadDir(dir string) (Config, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return Config{}, fmt.Errorf("rls: %w", err)
	}
	var cfg Config
	seen := map[string]string{}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("rls: %w", err)
		}
		d, err := ParseDomain(path, b)
		if err != nil {
			return Config{}, err
		}
		if other, dup := seen[d.Name]; dup {
			return Config{}, &policy.ConfigError{File: path, Line: 1, Msg: fmt.Sprintf("duplicate domain '%s' (also in %s)", d.Name, other)}
		}
		seen[d.Name] = path
		cfg.Domains = append(cfg.Domains, d)
	}
	return cfg, nil
}

// ParseDomain reads one config file from b; name is the file name used in
// errors. It checks the file as the reference does (unknown keys, empty
// keys, duplicate descriptors, units, replaces) and floodgate's extensions
// (every limit must be one that floodgate can run).
func ParseDomain(name string, b []byte) (Domain, error) {
	p := parser{file: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		line, msg := yamlline.Locate(b, err)
		return Domain{}, &policy.ConfigError{File: name, Line: line, Msg: "error loading config file: " + msg}
	}
	if len(doc.Content) == 0 {
		return Domain{}, p.errf(&doc, "config file cannot have empty domain")
	}
	root := doc.Content[0]
	d := Domain{File: name}
	err := p.fields(root, []string{"domain", "descriptors"}, nil, func(k string, v *yaml.Node) error {
		var err error
		switch k {
		case "domain":
			d.Name, err = p.str(v)
		case "descriptors":
			d.Descriptors, err = p.descriptors(v, d.Name+".")
		}
		return err
	})
	if err != nil {
		return Domain{}, err
	}
	if d.Name == "" {
		return Domain{}, p.errf(root, "config file cannot have empty domain")
	}
	return d, nil
}

type parser struct{ file string }

func (p *parser) errf(n *yaml.Node, format string, args ...any) error {
	return &policy.ConfigError{File: p.file, Line: max(n.Line, 1), Msg: fmt.Sprintf(format, args...)}
}

// fields walks a mapping, refusing keys not in known; it notes in lines
// (when not nil) the line of each key.
func (p *parser) fields(n *yaml.Node, known []string, lines map[string]int, f func(key string, v *yaml.Node) error) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return p.errf(n, "config error, expected a map")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return p.errf(k, "config error, key is not of type string")
		}
		if !slices.Contains(known, k.Value) {
			return p.errf(k, "config error, unknown key '%s'", k.Value)
		}
		if seen[k.Value] {
			return p.errf(k, "config error, key '%s' appears twice", k.Value)
		}
		seen[k.Value] = true
		if lines != nil {
			lines[k.Value] = k.Line
		}
		if err := f(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) str(n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", p.errf(n, "config error, expected a string")
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

func (p *parser) bool(n *yaml.Node) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		return false, p.errf(n, "config error, expected true or false, not %q", n.Value)
	}
	return b, nil
}

func (p *parser) uint(n *yaml.Node, bits int) (uint64, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, p.errf(n, "config error, expected a number")
	}
	v, err := strconv.ParseUint(n.Value, 10, bits)
	if err != nil {
		return 0, p.errf(n, "config error, %q is not a whole number from 0 to %d", n.Value, uint64(1)<<bits-1)
	}
	return v, nil
}

func (p *parser) list(n *yaml.Node, f func(*yaml.Node) error) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return p.errf(n, "config error, expected a list")
	}
	for _, e := range n.Content {
		if e.Kind != yaml.MappingNode {
			return p.errf(e, "config error, yaml file contains list of type other than map")
		}
		if err := f(e); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) descriptors(n *yaml.Node, parent string) ([]Descriptor, error) {
	var out []Descriptor
	seen := map[string]bool{}
	err := p.list(n, func(e *yaml.Node) error {
		d := Descriptor{Line: e.Line, lines: map[string]int{}}
		var nested *yaml.Node
		err := p.fields(e, descriptorFields, d.lines, func(k string, v *yaml.Node) error {
			if k == "descriptors" {
				nested = v
				return nil
			}
			return p.descriptorField(&d, k, v)
		})
		if err != nil {
			return err
		}
		if err := p.checkDescriptor(d, parent, seen); err != nil {
			return err
		}
		if nested != nil {
			if d.Descriptors, err = p.descriptors(nested, parent+d.composite()+"."); err != nil {
				return err
			}
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

// descriptorFields are the fields of a descriptor.
var descriptorFields = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "quota_mode",
	"detailed_metric", "value_to_metric", "share_threshold", "credential"}

// descriptorField parses field k of a descriptor into d (its nested
// descriptors aside).
func (p *parser) descriptorField(d *Descriptor, k string, v *yaml.Node) error {
	var err error
	switch k {
	case "key":
		d.Key, err = p.str(v)
	case "value":
		d.Value, err = p.str(v)
	case "rate_limit":
		var r RateLimit
		if r, err = p.rateLimit(v); err == nil {
			d.RateLimit = &r
		}
	case "rate_limits":
		err = p.list(v, func(e *yaml.Node) error {
			r, err := p.rateLimit(e)
			d.RateLimits = append(d.RateLimits, r)
			return err
		})
	case "shadow_mode":
		d.ShadowMode, err = p.bool(v)
	case "quota_mode":
		d.QuotaMode, err = p.bool(v)
	case "detailed_metric":
		d.DetailedMetric, err = p.bool(v)
	case "value_to_metric":
		d.ValueToMetric, err = p.bool(v)
	case "share_threshold":
		d.ShareThreshold, err = p.bool(v)
	case "credential":
		d.Credential, err = p.bool(v)
	}
	return err
}

// checkDescriptor checks d, a descriptor of the level under parent whose
// composite keys so far are seen, each error at the line of what is wrong.
func (p *parser) checkDescriptor(d Descriptor, parent string, seen map[string]bool) error {
	at := func(line int, format string, args ...any) error {
		return p.errf(&yaml.Node{Line: line}, format, args...)
	}
	if d.Key == "" {
		return at(d.lineOf("key"), "descriptor has empty key")
	}
	final := d.composite()
	if seen[final] {
		return at(d.Line, "duplicate descriptor composite key '%s%s'", parent, final)
	}
	seen[final] = true
	if d.ShareThreshold && !strings.HasSuffix(d.Value, "*") {
		return at(d.lineOf("share_threshold"), "share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", final)
	}
	if d.RateLimit == nil && len(d.RateLimits) > 0 {
		return at(d.lineOf("rate_limits"), "rate_limits needs a rate_limit beside it")
	}
	for _, r := range d.RateLimits {
		if f := r.extra(); f != "" {
			return at(r.lineOf(f), "a limit of rate_limits cannot be unlimited, named or replace others: put that on rate_limit")
		}
	}
	if d.RateLimit != nil && d.RateLimit.Unlimited && len(d.RateLimits) > 0 {
		return at(d.lineOf("rate_limits"), "an unlimited descriptor cannot have rate_limits")
	}
	return nil
}

func (p *parser) rateLimit(n *yaml.Node) (RateLimit, error) {
	r := RateLimit{Line: n.Line, lines: map[string]int{}}
	var unitNode *yaml.Node
	err := p.fields(n, rateLimitFields, r.lines, func(k string, v *yaml.Node) error {
		if k == "unit" {
			unitNode = v
		}
		return p.rateLimitField(&r, k, v)
	})
	if err != nil {
		return r, err
	}
	if i := slices.Index(r.Replaces, r.Name); i >= 0 && r.Name != "" {
		return r, p.errf(&yaml.Node{Line: r.replaceLines[i]}, "replaces should not contain name of same descriptor")
	}
	if r.Unlimited {
		return r, p.checkUnlimited(r, unitNode)
	}
	at := unitNode
	if at == nil {
		at = n
	}
	if _, err := r.Window(); err != nil {
		return r, p.errf(at, "%s", err.Error())
	}
	if _, err := r.policy("check"); err != nil {
		return r, p.errf(&yaml.Node{Line: r.errLine(err)}, "%s", strings.TrimPrefix(err.Error(), "floodgate: invalid configuration: "))
	}
	return r, nil
}

// rateLimitFields are the fields of a rate_limit.
var rateLimitFields = []string{"requests_per_unit", "unit", "unit_multiplier", "unlimited", "name", "replaces", "algorithm", "burst",
	"leased", "lease_refresh"}

// rateLimitField parses field k of a rate_limit into r.
func (p *parser) rateLimitField(r *RateLimit, k string, v *yaml.Node) error {
	var err error
	var u uint64
	switch k {
	case "requests_per_unit":
		u, err = p.uint(v, 32)
		r.RequestsPerUnit = uint32(u)
	case "unit":
		r.Unit, err = p.str(v)
	case "unit_multiplier":
		u, err = p.uint(v, 32)
		r.UnitMultiplier = uint32(u)
	case "unlimited":
		r.Unlimited, err = p.bool(v)
	case "name":
		r.Name, err = p.str(v)
	case "replaces":
		err = p.list(v, func(e *yaml.Node) error { return p.replace(r, e) })
	case "algorithm":
		var s string
		s, err = p.str(v)
		r.Algorithm = policy.Kind(s)
	case "burst":
		u, err = p.uint(v, 52)
		r.Burst = int64(u)
	case "leased":
		r.Leased, err = p.bool(v)
	case "lease_refresh":
		err = p.leaseRefresh(r, v)
	}
	return err
}

// replace parses one entry of a rate_limit's replaces into r.
func (p *parser) replace(r *RateLimit, e *yaml.Node) error {
	var name string
	err := p.fields(e, []string{"name"}, nil, func(_ string, v *yaml.Node) error {
		var err error
		name, err = p.str(v)
		return err
	})
	if err != nil {
		return err
	}
	if name == "" {
		return p.errf(e, "should not have an empty replaces entry")
	}
	r.Replaces = append(r.Replaces, name)
	r.replaceLines = append(r.replaceLines, e.Line)
	return nil
}

// leaseRefresh parses a rate_limit's lease_refresh into r.
func (p *parser) leaseRefresh(r *RateLimit, v *yaml.Node) error {
	s, err := p.str(v)
	if err != nil {
		return err
	}
	r.LeaseRefresh, err = time.ParseDuration(s)
	if err != nil || r.LeaseRefresh <= 0 {
		return p.errf(v, "lease_refresh %q: want a duration from 1ms to 10s, such as 100ms", s)
	}
	return nil
}

// checkUnlimited refuses what an unlimited rate_limit cannot have: a
// lease, a unit.
func (p *parser) checkUnlimited(r RateLimit, unitNode *yaml.Node) error {
	if l := max(r.lines["leased"], r.lines["lease_refresh"]); l != 0 && (r.Leased || r.LeaseRefresh != 0) {
		return p.errf(&yaml.Node{Line: l}, "an unlimited limit cannot be leased (leased and lease_refresh belong to a token bucket)")
	}
	if r.Unit != "" {
		if _, err := r.Window(); err == nil {
			return p.errf(unitNode, "should not specify rate limit unit when unlimited")
		}
	}
	return nil
}
