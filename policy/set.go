package policy

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/credkey"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/store"
)

// Config is a whole rate-limiting setup as data: what a config file holds.
type Config struct {
	// Domain names the setup (as envoyproxy/ratelimit's domain); it
	// prefixes the keys of descriptors, so that two setups sharing a store
	// and a policy name never share a descriptor's budget.
	Domain string
	// Policies are the named limits.
	Policies []Policy
	// DefaultPlan is the policy of a key that has no override and that the
	// resolver does not place: the plan of unknown keys. Optional; without
	// it an unknown key is not limited by plan rules.
	DefaultPlan string
	// Overrides map keys (API keys, service names, ...) to their policy:
	// a plan ("pro") or a policy negotiated for one key.
	Overrides map[string]string
	// Rules map request descriptors to policies (see [Rule]).
	Rules []Rule
}

// Rule maps a descriptor entry to a policy, the way envoyproxy/ratelimit's
// descriptors do: a request descriptor is a list of (key, value) entries
// ("source_service: purge-orchestrator", then "route: /img"); its entries
// are matched in order, the first against the top-level rules, the next
// against the rules nested in the one that matched, and so on. The rule that
// matches the descriptor's last entry decides: its policy limits the
// descriptor, keyed by every entry's key and value.
//
// A rule with a Value matches that value only; a rule without one matches
// any value, and each value gets its own budget. A value rule is preferred
// over a wildcard rule of the same key.
type Rule struct {
	// Key is the descriptor entry's key ("remote_address", "api_key",
	// "route", ...). Required.
	Key string
	// Value is the entry's value to match; "" matches any value.
	Value string
	// Policy is the name of the policy applied to descriptors ending here;
	// "" means none (the rule only leads to nested rules).
	Policy string
	// Plan, instead of Policy, applies the plan of the entry's value: its
	// override, else the resolver's answer, else DefaultPlan.
	Plan bool
	// Rules are the nested rules, matched against the next entry.
	Rules []Rule
}

// ResolveFunc places a key (an API key, a token) on a plan: it returns the
// name of a policy, or "" when it does not know the key. It is called only
// for keys without an override, and its answers are cached.
type ResolveFunc func(ctx context.Context, key string) (policy string, err error)

// Set is one compiled Config on one store: every policy's limiter, the
// overrides, the rules. A Set is immutable and safe for concurrent use;
// [Live] swaps Sets when the config changes.
type Set struct {
	cfg      Config
	store    store.Store
	limiters map[string]*store.Limiter
	leases   map[string]*lease.Limiter // the Leased policies'
	policies map[string]Policy
	// plans maps keys to limiters: the overrides (until 0), then the
	// resolver's answers as the Set's requests bring them.
	plans    *snapshot[planEntry]
	deflt    limit
	rules    []*node
	resolver *resolver
	hasher   *credkey.Hasher
	// ownSecret: the hasher's secret is the process's (no WithKeySecret).
	ownSecret bool
	dry       map[floodgate.Limiter]bool // by limit.decider
}

// limit is a policy's limiters in a Set: its store limiter and, for a
// Leased policy, the lease limiter that decides it.
type limit struct {
	lim   *store.Limiter
	lease *lease.Limiter
}

// decider is the limiter that decides the policy's requests.
func (l limit) decider() floodgate.Limiter {
	if l.lease != nil {
		return l.lease
	}
	return l.lim
}

type node struct {
	key, value string
	limiter    limit
	plan       bool
	children   []*node
}

// checkCredentials is [Live.CheckCredentials] for the Set.
func (s *Set) checkCredentials() error {
	if s.ownSecret && store.IsShared(s.store) {
		return errNoFleetSecret
	}
	return nil
}

// compile builds the Set of cfg on s with a resolver, a hasher and, when limiter is not
// nil, the function that makes each (valid) policy's limiters (without
// it, only store limiters: no leases).
func compile(cfg Config, s store.Store, res *resolver, h *credkey.Hasher, limiter func(Policy) (limit, error)) (*Set, error) {
	if limiter == nil {
		limiter = func(p Policy) (limit, error) {
			l, err := p.Limiter(s)
			return limit{lim: l}, err
		}
	}
	set := &Set{cfg: cfg, store: s, limiters: map[string]*store.Limiter{}, policies: map[string]Policy{},
		resolver: res, hasher: h, dry: map[floodgate.Limiter]bool{}}
	if err := set.addPolicies(cfg.Policies, limiter); err != nil {
		return nil, err
	}
	if err := set.addPlans(cfg); err != nil {
		return nil, err
	}
	var err error
	if set.rules, err = set.buildRules(cfg.Rules, ""); err != nil {
		return nil, err
	}
	return set, nil
}

// addPolicies validates each policy and makes its limiters.
func (s *Set) addPolicies(policies []Policy, limiter func(Policy) (limit, error)) error {
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return err
		}
		if _, dup := s.limiters[p.Name]; dup {
			return fmt.Errorf("%w: two policies are named %q", floodgate.ErrInvalidConfig, p.Name)
		}
		l, err := limiter(p)
		if err != nil {
			return err
		}
		s.limiters[p.Name] = l.lim
		if l.lease != nil {
			if s.leases == nil {
				s.leases = map[string]*lease.Limiter{}
			}
			s.leases[p.Name] = l.lease
		}
		s.policies[p.Name] = p
		if p.DryRun {
			s.dry[l.decider()] = true
		}
	}
	return nil
}

// lookup returns the limiters of the policy called name, which what names.
func (s *Set) lookup(what, name string) (limit, error) {
	l, ok := s.limiters[name]
	if !ok {
		return limit{}, fmt.Errorf("%w: %s names the unknown policy %q", floodgate.ErrInvalidConfig, what, name)
	}
	return limit{lim: l, lease: s.leases[name]}, nil
}

// addPlans sets the default plan and the overrides.
func (s *Set) addPlans(cfg Config) error {
	if cfg.DefaultPlan != "" {
		l, err := s.lookup("default_plan", cfg.DefaultPlan)
		if err != nil {
			return err
		}
		s.deflt = l
	}
	overrides := map[string]planEntry{}
	for k, name := range cfg.Overrides {
		if k == "" {
			return fmt.Errorf("%w: an override has an empty key", floodgate.ErrInvalidConfig)
		}
		l, err := s.lookup(fmt.Sprintf("the override of %q", k), name)
		if err != nil {
			return err
		}
		overrides[k] = planEntry{limit: l}
	}
	s.plans = newSnapshot(overrides)
	return nil
}

// buildRules builds the rule tree of rs, at path in the tree.
func (s *Set) buildRules(rs []Rule, path string) ([]*node, error) {
	var out []*node
	seen := map[[2]string]bool{}
	for _, r := range rs {
		at := path + r.Key
		if r.Value != "" {
			at += "=" + r.Value
		}
		if r.Key == "" {
			return nil, fmt.Errorf("%w: rule %s: a rule needs a key", floodgate.ErrInvalidConfig, path+"?")
		}
		if seen[[2]string{r.Key, r.Value}] {
			return nil, fmt.Errorf("%w: rule %s appears twice", floodgate.ErrInvalidConfig, at)
		}
		seen[[2]string{r.Key, r.Value}] = true
		n, err := s.buildRule(r, at)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// buildRule builds the node of rule r, at at in the tree, and its children.
func (s *Set) buildRule(r Rule, at string) (*node, error) {
	n := &node{key: r.Key, value: r.Value, plan: r.Plan}
	switch {
	case r.Plan && r.Policy != "":
		return nil, fmt.Errorf("%w: rule %s has both a policy and plan", floodgate.ErrInvalidConfig, at)
	case r.Policy != "":
		l, err := s.lookup("rule "+at, r.Policy)
		if err != nil {
			return nil, err
		}
		n.limiter = l
	case !r.Plan && len(r.Rules) == 0:
		return nil, fmt.Errorf("%w: rule %s limits nothing: give it a policy, plan: true, or nested rules", floodgate.ErrInvalidConfig, at)
	}
	kids, err := s.buildRules(r.Rules, at+" > ")
	if err != nil {
		return nil, err
	}
	n.children = kids
	return n, nil
}

// Config returns the Config the Set was compiled from.
func (s *Set) Config() Config { return s.cfg }

// Limiter returns the store limiter of the named policy. For a Leased
// policy it decides directly on the store, without leases (the same global
// bucket): [Set.Lease] returns the limiter that decides through them.
func (s *Set) Limiter(name string) (*store.Limiter, bool) {
	l, ok := s.limiters[name]
	return l, ok
}

// Lease returns the lease limiter of the named policy when it is Leased:
// what [Live.Take] and [Set.Match] decide its requests with. It belongs to
// the [Live] (closed when the policy changes or goes, and by Live.Close).
func (s *Set) Lease(name string) (*lease.Limiter, bool) {
	l, ok := s.leases[name]
	return l, ok
}

// Policy returns the named policy.
func (s *Set) Policy(name string) (Policy, bool) {
	p, ok := s.policies[name]
	return p, ok
}

// Plan returns the limiter of key's plan: its override, else the
// resolver's answer (cached), else the default plan. It returns nil when
// none applies. With only the static table (no resolver, or a cached
// answer) it takes no lock, reads no clock and allocates nothing. For a
// Leased plan it is the plan's store limiter (see [Set.Limiter]);
// [Live.Take] decides through the lease.
func (s *Set) Plan(ctx context.Context, key string) (*store.Limiter, error) {
	e, err := s.plan(ctx, key)
	return e.lim, err
}

// plan is Plan returning both of the plan's limiters.
func (s *Set) plan(ctx context.Context, key string) (limit, error) {
	if e, ok := s.plans.load(key); ok && s.fresh(e) {
		return e.limit, nil
	}
	if s.resolver == nil {
		return s.deflt, nil
	}
	return s.resolve(ctx, key)
}

// planEntry is a key's limiters in a Set, and until when they hold: 0 for
// an override, the resolver's answer's expiry otherwise.
type planEntry struct {
	limit
	until int64 // Nanotime
}

func (s *Set) fresh(e planEntry) bool {
	return e.until == 0 || s.resolver.now.Load() < e.until
}

// resolve is Plan's slow path: an answer of the resolver the Set has not
// seen yet, or one that expired.
func (s *Set) resolve(ctx context.Context, key string) (limit, error) {
	if e, ok := s.plans.loadPending(key, s.trimPlans); ok && s.fresh(e) {
		return e.limit, nil
	}
	name, until, err := s.resolver.resolve(ctx, key)
	if err != nil {
		if s.deflt.lim != nil && ctx.Err() == nil {
			// The resolver fails (for a second at a time, see
			// resolver): an unknown key is on the default plan meanwhile.
			return s.deflt, nil
		}
		return limit{}, err
	}
	lim := s.deflt
	if name != "" {
		l, ok := s.limiters[name]
		if !ok {
			return limit{}, fmt.Errorf("%w: policy: the resolver placed a key on %q, which is not a policy of the config", floodgate.ErrInvalidConfig, name)
		}
		lim = limit{lim: l, lease: s.leases[name]}
	}
	s.plans.store(key, planEntry{limit: lim, until: until}, s.trimPlans)
	return lim, nil
}

// trimPlans bounds a Set's merged plans like the resolver's answers: the
// expired answers go, then, above the resolver's bound, all of them (the
// resolver still has them); overrides stay.
func (s *Set) trimPlans(m map[string]planEntry) {
	if len(m) <= len(s.cfg.Overrides)+s.resolver.max {
		return
	}
	now := s.resolver.now.Load()
	maps.DeleteFunc(m, func(_ string, e planEntry) bool { return e.until != 0 && now >= e.until })
	if len(m) <= len(s.cfg.Overrides)+s.resolver.max {
		return
	}
	maps.DeleteFunc(m, func(_ string, e planEntry) bool { return e.until != 0 })
}

// Match appends to dst one check per descriptor that a rule limits, each of
// cost n, and returns it. A descriptor no rule limits adds nothing (it is
// not limited). The key of a check is the domain and the descriptor's
// entries, joined (a keyed hash of them when an entry is a credential).
//
// The checks of enforcing policies come first; the checks of dry-run
// policies (Policy.DryRun) follow, from index enforcing on: decide them
// apart, so that their refusals are only reported.
func (s *Set) Match(ctx context.Context, descriptors []middleware.Descriptor, n int, dst []floodgate.Check) (checks []floodgate.Check, enforcing int, err error) {
	base := len(dst)
	dst, err = s.match(ctx, descriptors, n, dst)
	if err != nil {
		return dst, 0, err
	}
	// Stable partition: enforcing checks first.
	tail := dst[base:]
	k := 0
	for i := range tail {
		if !s.dry[tail[i].Limiter] {
			tail[k], tail[i] = tail[i], tail[k]
			k++
		}
	}
	return dst, base + k, nil
}

func (s *Set) match(ctx context.Context, descriptors []middleware.Descriptor, n int, dst []floodgate.Check) ([]floodgate.Check, error) {
	for _, d := range descriptors {
		if len(d) == 0 {
			continue
		}
		nodes := s.rules
		var last *node
		for _, e := range d {
			last = pick(nodes, e)
			if last == nil {
				break
			}
			nodes = last.children
		}
		if last == nil {
			continue
		}
		l := last.limiter
		if last.plan {
			var err error
			if l, err = s.plan(ctx, d[len(d)-1].Value); err != nil {
				return dst, err
			}
		}
		if l.lim == nil {
			continue
		}
		key := s.cfg.Domain + "|" + descriptorKey(d)
		for _, e := range d {
			if e.Credential {
				if err := s.checkCredentials(); err != nil {
					return dst, err
				}
				key = s.hasher.Key(key)
				break
			}
		}
		dst = append(dst, floodgate.Check{Limiter: l.decider(), Key: key, N: n})
	}
	return dst, nil
}

// pick returns the rule of nodes matching e: the one with e's value, else
// the wildcard of e's key.
func pick(nodes []*node, e middleware.Entry) *node {
	var wild *node
	for _, n := range nodes {
		if n.key != e.Key {
			continue
		}
		if n.value == e.Value {
			return n
		}
		if n.value == "" {
			wild = n
		}
	}
	return wild
}

// descriptorKey joins a descriptor's entries into a store key. Keys and
// values are length-prefixed so that no value can forge another entry.
func descriptorKey(d middleware.Descriptor) string {
	var b strings.Builder
	for i, e := range d {
		if i > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "%d:%s=%d:%s", len(e.Key), e.Key, len(e.Value), e.Value)
	}
	return b.String()
}
