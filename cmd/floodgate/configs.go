package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/rls"
)

// Config file kinds.
const (
	kindPolicy = "policy" // a floodgate policy file (package policy)
	kindEnvoy  = "envoy"  // an envoyproxy/ratelimit config (module rls)
)

// configFile is one loaded config file of either kind.
type configFile struct {
	Path   string
	Kind   string
	Policy policy.Config // kind policy
	Envoy  rls.Domain    // kind envoy
	text   []byte
}

// errRead marks an error reading a file (an input error, exit 2), as
// opposed to an error in its content (a finding, exit 1).
type errRead struct{ err error }

func (e errRead) Error() string { return e.err.Error() }

// loadConfig reads path as a policy file or, when it has a top-level
// "descriptors" key, as an envoyproxy/ratelimit config; kind forces one
// ("" detects). Errors in the content are *policy.ConfigError (file:line).
func loadConfig(path, kind string) (*configFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errRead{err}
	}
	if kind == "" {
		kind = detectKind(b)
	}
	f := &configFile{Path: path, Kind: kind, text: b}
	switch kind {
	case kindPolicy:
		f.Policy, err = policy.Parse(path, b)
	case kindEnvoy:
		f.Envoy, err = rls.ParseDomain(path, b)
	default:
		return nil, errRead{fmt.Errorf("%s: unknown config kind %q (want policy or envoy)", path, kind)}
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// detectKind tells an envoyproxy/ratelimit config (a top-level
// "descriptors" key, as the reference's files have) from a policy file.
func detectKind(b []byte) string {
	for line := range bytes.Lines(b) {
		if bytes.HasPrefix(line, []byte("descriptors:")) || bytes.HasPrefix(line, []byte(`"descriptors":`)) {
			return kindEnvoy
		}
	}
	if bytes.Contains(b, []byte(`"descriptors"`)) && !bytes.Contains(b, []byte(`"policies"`)) {
		return kindEnvoy
	}
	return kindPolicy
}

// limit is one limit of either kind of config, in the terms every check
// and the diff compare: its sustained rate and its capacity.
type limit struct {
	Name      string  `json:"name"`
	Desc      string  `json:"description"`
	PerSec    float64 `json:"per_second"`
	Capacity  int64   `json:"capacity"`
	DryRun    bool    `json:"dry_run,omitempty"`
	Leased    bool    `json:"leased,omitempty"`
	Algorithm string  `json:"algorithm"`
	// Named: the limit has a name of its own (every policy; an Envoy
	// rate_limit with name:), not only its descriptor path.
	Named bool `json:"-"`
	// Own is an Envoy rate_limit's name: (the name it is advertised and
	// counted under), "" without one.
	Own  string `json:"-"`
	File string `json:"-"`
	Line int    `json:"-"`
}

func (l limit) at() string { return l.File + ":" + strconv.Itoa(max(l.Line, 1)) }

// policyLimit describes a policy as a limit.
func policyLimit(p policy.Policy) limit {
	alg := p.Algorithm
	if alg == "" {
		alg = policy.TokenBucket
	}
	l := limit{Name: p.Name, Desc: strings.TrimPrefix(p.String(), p.Name+": "), DryRun: p.DryRun, Leased: p.Leased, Algorithm: string(alg), Named: true}
	switch alg {
	case policy.TokenBucket, policy.LeakyBucket:
		l.PerSec = perSecond(p.Rate)
		l.Capacity = p.Burst
		if alg == policy.TokenBucket && l.Capacity == 0 {
			l.Capacity = p.Rate.N
		}
	default:
		if p.Window > 0 {
			l.PerSec = float64(p.Limit) / p.Window.Seconds()
		}
		l.Capacity = p.Limit
	}
	return l
}

// limits lists the file's limits: a policy file's policies (with the line
// of each), an Envoy config's rate limits named by descriptor path as the
// rls module names them ("edge.tenant", "edge.tenant#1").
func (f *configFile) limits() []limit {
	var out []limit
	if f.Kind == kindPolicy {
		for _, p := range f.Policy.Policies {
			l := policyLimit(p)
			l.File, l.Line = f.Path, policyLine(f.text, p.Name)
			out = append(out, l)
		}
		return out
	}
	var walk func(ds []rls.Descriptor, path string, shadow bool)
	walk = func(ds []rls.Descriptor, path string, shadow bool) {
		for _, d := range ds {
			at := path + "." + d.Key
			if d.Value != "" {
				at += "_" + d.Value
			}
			if d.RateLimit != nil && !d.RateLimit.Unlimited {
				for j, r := range append([]rls.RateLimit{*d.RateLimit}, d.RateLimits...) {
					name := at
					if j > 0 {
						name += "#" + strconv.Itoa(j)
					}
					out = append(out, envoyLimit(name, r, d.ShadowMode || shadow, f.Path))
				}
			}
			walk(d.Descriptors, at, shadow)
		}
	}
	walk(f.Envoy.Descriptors, f.Envoy.Name, false)
	return out
}

func envoyLimit(name string, r rls.RateLimit, shadow bool, file string) limit {
	alg := r.Algorithm
	if alg == "" {
		alg = policy.FixedWindow
	}
	l := limit{Name: name, DryRun: shadow, Leased: r.Leased, Algorithm: string(alg), Named: r.Name != "", Own: r.Name, File: file, Line: r.Line}
	w, err := r.Window()
	if err == nil && w > 0 {
		l.PerSec = float64(r.RequestsPerUnit) / w.Seconds()
	}
	l.Capacity = int64(r.RequestsPerUnit)
	if alg == policy.LeakyBucket || (alg == policy.TokenBucket && r.Burst > 0) {
		l.Capacity = r.Burst
	}
	unit := r.Unit
	if r.UnitMultiplier > 1 {
		unit = strconv.Itoa(int(r.UnitMultiplier)) + " x " + unit
	}
	l.Desc = fmt.Sprintf("%s %d per %s", alg, r.RequestsPerUnit, unit)
	if alg != policy.FixedWindow && alg != policy.SlidingLog && alg != policy.SlidingCounter {
		l.Desc += fmt.Sprintf(" burst %d", l.Capacity)
	}
	if r.Name != "" {
		l.Desc += fmt.Sprintf(" (name %s)", r.Name)
	}
	if shadow {
		l.Desc += " (shadow mode)"
	}
	return l
}

// policyLine finds the line of the policy named name in a policy file's
// text: the line of its "name:" field (1 when not found, e.g. a JSON file
// on one line).
func policyLine(text []byte, name string) int {
	n := 0
	for line := range bytes.Lines(text) {
		n++
		s := string(line)
		i := strings.Index(s, "name")
		if i < 0 {
			continue
		}
		rest := strings.TrimLeft(s[i+len("name"):], `"' `)
		if !strings.HasPrefix(rest, ":") {
			continue
		}
		rest = strings.TrimLeft(rest[1:], " ")
		rest = strings.TrimLeft(rest, `"'`)
		if strings.HasPrefix(rest, name) {
			tail := rest[len(name):]
			if tail == "" || strings.IndexAny(tail[:1], "\"' ,}\r\n#") == 0 {
				return n
			}
		}
	}
	return 1
}

// perSecond is r in units per second (0 for a rate without a period).
func perSecond(r floodgate.Rate) float64 {
	if r.Per <= 0 {
		return 0
	}
	return float64(r.N) / r.Per.Seconds()
}
