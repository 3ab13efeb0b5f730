package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/ratehdr"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
)

// policy returns the floodgate policy that runs r under name. A
// requests_per_unit of 0 on a window is no policy at all (every counted
// request is over the limit, as in the reference): the zero Policy, nil.
func (r RateLimit) policy(name string) (policy.Policy, error) {
	w, err := r.Window()
	if err != nil {
		return policy.Policy{}, err
	}
	p := policy.Policy{Name: name, Algorithm: r.Algorithm, Leased: r.Leased, LeaseRefresh: r.LeaseRefresh}
	if err := r.checkLease(); err != nil {
		return policy.Policy{}, err
	}
	bad := func(field string, format string, args ...any) error {
		return &fieldError{fields: []string{field}, err: fmt.Errorf(format, args...)}
	}
	switch r.Algorithm {
	case "", policy.FixedWindow, policy.SlidingLog, policy.SlidingCounter:
		if p.Algorithm == "" {
			p.Algorithm = policy.FixedWindow
		}
		if r.Burst != 0 {
			return policy.Policy{}, bad("burst", "burst belongs to token-bucket and leaky-bucket, not %s", p.Algorithm)
		}
		if r.RequestsPerUnit == 0 {
			return policy.Policy{}, nil
		}
		p.Limit, p.Window = int64(r.RequestsPerUnit), w
	case policy.TokenBucket, policy.LeakyBucket:
		if r.RequestsPerUnit == 0 {
			return policy.Policy{}, bad("requests_per_unit", "requests_per_unit must be at least 1 with %s", r.Algorithm)
		}
		p.Rate = floodgate.Rate{N: int64(r.RequestsPerUnit), Per: w}
		p.Burst = r.Burst
		p.NoDelay = r.Algorithm == policy.LeakyBucket // Envoy cannot delay a request
	default:
		return policy.Policy{}, bad("algorithm", "unknown algorithm %q (want fixed-window, token-bucket, leaky-bucket, sliding-log or sliding-counter)", r.Algorithm)
	}
	if err := p.Validate(); err != nil {
		return policy.Policy{}, &fieldError{fields: blamed(err.Error()), err: err}
	}
	return p, nil
}

// blamed returns the fields of a limit that msg, an error of
// policy.Policy.Validate, blames, first the likeliest.
func blamed(msg string) []string {
	switch {
	case strings.Contains(msg, "burst"):
		return []string{"burst", "requests_per_unit"}
	case strings.Contains(msg, "rate"), strings.Contains(msg, "limit"):
		return []string{"requests_per_unit", "unit", "unit_multiplier"}
	case strings.Contains(msg, "window"):
		return []string{"unit", "unit_multiplier"}
	}
	return nil
}

// fieldError is an error of a limit that one of its fields causes, told
// at the line of the first of fields the file gives.
type fieldError struct {
	fields []string
	err    error
}

func (e *fieldError) Error() string { return e.err.Error() }

// Unwrap returns the error, else [floodgate.ErrInvalidConfig].
func (e *fieldError) Unwrap() []error { return []error{e.err, floodgate.ErrInvalidConfig} }

// leaseError is an error of a limit's leased or lease_refresh field.
func leaseError(field, msg string) error {
	return &fieldError{fields: []string{field, "leased", "lease_refresh"}, err: errors.New(msg)}
}

// checkLease checks the lease fields of r: leased only on a token bucket,
// lease_refresh only with leased and within lease's range. The policy
// checks them again; these errors speak of the file's fields.
func (r RateLimit) checkLease() error {
	if !r.Leased && r.LeaseRefresh == 0 {
		return nil
	}
	if !r.Leased {
		return leaseError("lease_refresh", "lease_refresh needs leased: true")
	}
	switch r.Algorithm {
	case policy.TokenBucket:
	case "", policy.FixedWindow:
		return leaseError("leased", "leased needs algorithm: token-bucket (a lease holds a token bucket's tokens); this limit is a fixed-window, the default without algorithm")
	case policy.LeakyBucket, policy.SlidingLog, policy.SlidingCounter:
		return leaseError("leased", fmt.Sprintf("leased needs algorithm: token-bucket (a lease holds a token bucket's tokens), not %s", r.Algorithm))
	default:
		return nil // the algorithm's own error
	}
	if r.LeaseRefresh != 0 && (r.LeaseRefresh < time.Millisecond || r.LeaseRefresh > 10*time.Second) {
		return leaseError("lease_refresh", fmt.Sprintf("lease_refresh %v outside 1ms..10s", r.LeaseRefresh))
	}
	return nil
}

// units are the reference's units, largest first, for CurrentLimit.
var units = []struct {
	d time.Duration
	u rlspb.RateLimitResponse_RateLimit_Unit
}{
	{365 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_YEAR},
	{30 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_MONTH},
	{7 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlspb.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlspb.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlspb.RateLimitResponse_RateLimit_SECOND},
}

// currentLimit describes a limit of requests per window as the protocol
// does: the largest unit that divides the window, times a multiplier.
func currentLimit(rpu uint32, w time.Duration, name string, multiplier uint32) *rlspb.RateLimitResponse_RateLimit {
	out := &rlspb.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: rlspb.RateLimitResponse_RateLimit_SECOND}
	if multiplier > 1 {
		w /= time.Duration(multiplier)
	}
	for _, u := range units {
		if w >= u.d && w%u.d == 0 {
			out.Unit = u.u
			if m := uint32(w / u.d); m > 1 {
				multiplier = max(multiplier, 1) * m
			}
			break
		}
	}
	if multiplier > 1 {
		out.UnitMultiplier = wrapperspb.UInt32(multiplier)
	}
	return out
}

// lim is one compiled rate limit.
type lim struct {
	policy string // its floodgate policy name
	header string // its name in RateLimit-Policy and RateLimit
	l      *store.Limiter
	// leased is a leased limit's lease limiter (nil for the others): what
	// decides its counted hits; l decides the rest (looks, refunds).
	leased  *leased
	blocked bool // requests_per_unit 0 on a window: nothing is admitted
	fixed   bool // a fixed window: duration_until_reset is the window's end
	window  time.Duration
	pb      *rlspb.RateLimitResponse_RateLimit
	limit   int64 // requests_per_unit, for the near-limit threshold
	// q and w are what RateLimit-Policy advertises (ratehdr.Quota), set
	// by bind.
	q, w int64
}

// limit is what a descriptor ending at a node gets.
type limit struct {
	name      string
	replaces  []string
	unlimited bool
	shadow    bool
	quota     bool
	detailed  bool
	statsKey  string // domain.key_value.key: the reference's stats key
	lims      []lim
}

type node struct {
	children  map[string]*node // by "key_value" and "key"
	wildcards []string         // children keys ending in '*', in file order
	limit     *limit
	cred      bool   // the entry matched here holds a credential
	vtm       bool   // value_to_metric
	share     string // share_threshold: the wildcard value every match counts under
	kv        string // how the config names the level: key_value, key_value*, or key
}

// compiled is one loaded Config: the trees of its domains.
type compiled struct {
	domains  map[string]*node
	policies []policy.Policy
	// named lists every lim, to bind limiters once policy.Live has them.
	named []*lim
	// credential: a descriptor of the config is marked credential.
	credential bool
	// leasedAt is where the config's first leased limit is (nil: none).
	leasedAt *policy.ConfigError
}

// compile builds the trees of cfg and the policies they need; limiters are
// bound by bind once the policies are live.
func compile(cfg Config) (*compiled, error) {
	c := &compiled{domains: map[string]*node{}}
	seen := map[string]bool{}
	for _, d := range cfg.Domains {
		p := parser{file: d.File}
		if d.Name == "" {
			return nil, &policy.ConfigError{File: d.File, Line: 1, Msg: "config file cannot have empty domain"}
		}
		if _, dup := c.domains[d.Name]; dup {
			return nil, &policy.ConfigError{File: d.File, Line: 1, Msg: fmt.Sprintf("duplicate domain '%s' in config file", d.Name)}
		}
		root := &node{children: map[string]*node{}}
		if err := c.build(&p, root, d.Descriptors, d.Name, seen); err != nil {
			return nil, err
		}
		c.domains[d.Name] = root
	}
	return c, nil
}

func (c *compiled) build(p *parser, parent *node, ds []Descriptor, path string, seen map[string]bool) error {
	for i := range ds {
		d := &ds[i]
		errf := func(format string, args ...any) error {
			return &policy.ConfigError{File: p.file, Line: max(d.Line, 1), Msg: fmt.Sprintf(format, args...)}
		}
		if d.Key == "" {
			return errf("descriptor has empty key")
		}
		final := d.Key
		if d.Value != "" {
			final += "_" + d.Value
		}
		at := path + "." + final
		if _, dup := parent.children[final]; dup {
			return errf("duplicate descriptor composite key '%s'", at)
		}
		n := &node{children: map[string]*node{}, cred: d.Credential, vtm: d.ValueToMetric, kv: final}
		c.credential = c.credential || d.Credential
		if d.ShareThreshold {
			n.share = d.Value
		}
		if d.RateLimit != nil {
			lm, err := c.limit(p, d, at, seen)
			if err != nil {
				return err
			}
			n.limit = lm
		}
		if err := c.build(p, n, d.Descriptors, at, seen); err != nil {
			return err
		}
		if strings.HasSuffix(final, "*") {
			parent.wildcards = append(parent.wildcards, final)
		}
		parent.children[final] = n
	}
	return nil
}

// limit compiles the rate_limit and rate_limits of descriptor d, at
// config path at: one lim per limit, each a floodgate policy named by the
// path ("#1", "#2" for the limits of rate_limits) and advertised in the
// headers under its own name.
func (c *compiled) limit(p *parser, d *Descriptor, at string, seen map[string]bool) (*limit, error) {
	lm := &limit{name: d.RateLimit.Name, replaces: d.RateLimit.Replaces, unlimited: d.RateLimit.Unlimited,
		shadow: d.ShadowMode, quota: d.QuotaMode, detailed: d.DetailedMetric, statsKey: at}
	if lm.unlimited {
		return lm, nil
	}
	for j, r := range append([]RateLimit{*d.RateLimit}, d.RateLimits...) {
		errf := func(format string, args ...any) error {
			return &policy.ConfigError{File: p.file, Line: max(r.Line, d.Line, 1), Msg: fmt.Sprintf(format, args...)}
		}
		name := policyName(at)
		if j > 0 {
			name += "#" + strconv.Itoa(j)
		}
		if seen[name] {
			return nil, errf("two limits would share the floodgate policy name %q", name)
		}
		seen[name] = true
		pol, err := r.policy(name)
		if err != nil {
			return nil, &policy.ConfigError{File: p.file, Line: max(r.errLine(err), d.Line, 1), Msg: strings.TrimPrefix(err.Error(), "floodgate: invalid configuration: ")}
		}
		if pol.Leased && c.leasedAt == nil {
			c.leasedAt = &policy.ConfigError{File: p.file, Line: max(r.lines["leased"], r.Line, d.Line, 1)}
		}
		w, _ := r.Window()
		l := lim{policy: name, header: headerName(r.Name, name), window: w, limit: int64(r.RequestsPerUnit),
			fixed: r.Algorithm == "" || r.Algorithm == policy.FixedWindow, blocked: pol.Name == "",
			pb: currentLimit(r.RequestsPerUnit, w, r.Name, r.UnitMultiplier)}
		for _, o := range lm.lims {
			if o.header == l.header {
				return nil, errf("two limits of %s share the name %q: each limit of a descriptor is advertised under its own name", at, r.Name)
			}
		}
		if !l.blocked {
			c.policies = append(c.policies, pol)
		}
		lm.lims = append(lm.lims, l)
	}
	return lm, nil
}

// bind gives every limit its limiter from set.
func (c *compiled) bind(set *policy.Set) error {
	for _, root := range c.domains {
		if err := bindNode(root, set); err != nil {
			return err
		}
	}
	return nil
}

func bindNode(n *node, set *policy.Set) error {
	if n.limit != nil {
		for i := range n.limit.lims {
			l := &n.limit.lims[i]
			if l.blocked {
				l.q, l.w = l.limit, ratehdr.Seconds(l.window)
				continue
			}
			var ok bool
			if l.l, ok = set.Limiter(l.policy); !ok {
				return fmt.Errorf("%w: rls: policy %q is not running", floodgate.ErrInvalidConfig, l.policy)
			}
			l.q, l.w = ratehdr.Quota(l.l.Describe())
			if ll, ok := set.Lease(l.policy); ok {
				l.leased = &leased{Limiter: ll, direct: l.l}
			}
		}
	}
	for _, k := range n.children {
		if err := bindNode(k, set); err != nil {
			return err
		}
	}
	return nil
}

// policyName turns a descriptor path into a policy name: printable ASCII
// without spaces, quotes or backslashes, other bytes as %XX.
// headerName is a limit's name in the RateLimit-Policy and RateLimit
// headers, which end clients see: the rate_limit's name when it has one,
// else "rl-" and 32 bits of SHA-256 of its policy name, stable across
// processes and reloads and telling nothing of the config's paths.
func headerName(name, policy string) string {
	if name != "" {
		return policyName(name)
	}
	sum := sha256.Sum256([]byte(policy))
	return "rl-" + hex.EncodeToString(sum[:4])
}

func policyName(path string) string {
	ok := true
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' || c == '%' {
			ok = false
			break
		}
	}
	if ok {
		return path
	}
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// leased is the limiter of a leased limit: its lease limiter, which
// decides the counted hits on the tokens its leases hold, and the store
// limiter of the same global bucket, which decides directly.
type leased struct {
	*lease.Limiter
	direct *store.Limiter
}

// direct returns the store limiter behind a check's limiter: itself, or a
// leased limit's store limiter (the global bucket, without the lease).
func direct(l floodgate.Limiter) *store.Limiter {
	switch v := l.(type) {
	case *store.Limiter:
		return v
	case *leased:
		return v.direct
	case *knownOver:
		return v.l
	}
	return nil
}

// decider is the limiter that decides a limit's counted hits.
func (l *lim) decider() floodgate.Limiter {
	if l.leased != nil {
		return l.leased
	}
	return l.l
}

// lookup finds the limit of a request descriptor's entries in the tree of
// a domain, as the reference does: at each level the entry's key and value,
// else a wildcard value that prefixes it, else the key alone; the limit
// applies only at the descriptor's last entry. It records in path the node
// each entry matched (nil past the last match).
func lookup(root *node, entries []entry, path []*node) *node {
	cur := root
	var found *node
	var arr [128]byte
	for i, e := range entries {
		kv := append(append(append(arr[:0], e.key...), '_'), e.value...)
		next := cur.children[string(kv)]
		if next == nil {
			for _, w := range cur.wildcards {
				if p := w[:len(w)-1]; len(kv) >= len(p) && string(kv[:len(p)]) == p {
					next = cur.children[w]
					break
				}
			}
		}
		if next == nil {
			next = cur.children[e.key]
		}
		if i < len(path) {
			path[i] = next
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			found = next
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		cur = next
	}
	return found
}

type entry struct{ key, value string }
