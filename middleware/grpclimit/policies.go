package grpclimit

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/internal/describe"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/middleware"
)

// Source is one entry of a call descriptor: a key (as the policy set's rules
// name it) and where its value comes from. Build one with [PeerEntry],
// [HeaderEntry], [MethodEntry] or [ValueEntry].
type Source struct {
	e describe.Entry[call]
}

// call is what a Source reads: the call's context and full method, and the
// config of the interceptors it runs in (IP prefixes).
type call struct {
	c      *config
	ctx    context.Context
	method string
}

// PeerEntry is the entry key = the call's peer (its IP, aggregated by
// [WithIPPrefix]: IPv6 by /64 by default); envoy's "remote_address".
func PeerEntry(key string) Source {
	return Source{describe.Entry[call]{Key: key, Value: func(q call) string { return q.c.peerKey(q.ctx) }}}
}

// HeaderEntry is the entry key = the first value of metadata entry name (a
// service token, an API key). The value is a credential: matched and
// resolved to its plan in clear, stored only as a keyed hash
// (policy.WithKeySecret). A call without the entry does not yield the
// descriptor.
func HeaderEntry(name, key string) Source {
	return Source{describe.Entry[call]{Key: key, Credential: true, Value: func(q call) string {
		if v := metadata.ValueFromIncomingContext(q.ctx, name); len(v) > 0 {
			return v[0]
		}
		return ""
	}}}
}

// MethodEntry is the entry key = the call's full method
// ("/package.Service/Method").
func MethodEntry(key string) Source {
	return Source{describe.Entry[call]{Key: key, Value: func(q call) string { return q.method }}}
}

// ValueEntry is the entry key = f(ctx, method); "" means the call does not
// yield the descriptor. Mark credentials: they are stored only as a keyed
// hash. A nil f is refused by [WithDescriptor].
func ValueEntry(key string, credential bool, f func(ctx context.Context, method string) string) Source {
	e := describe.Entry[call]{Key: key, Credential: credential}
	if f != nil {
		e.Value = func(q call) string { return f(q.ctx, q.method) }
	}
	return Source{e}
}

// WithDescriptor adds a descriptor that every call yields to [Policies]:
// its entries, in order. A call for which an entry has no value does not
// yield that descriptor. It applies to Policies.
func WithDescriptor(entries ...Source) PoliciesOption {
	return policiesOpt(func(c *config) error {
		d := make([]describe.Entry[call], len(entries))
		for i, e := range entries {
			d[i] = e.e
		}
		if err := describe.Check(d); err != nil {
			return invalid("%v", err)
		}
		c.descriptors = append(c.descriptors, d)
		return nil
	})
}

// Policies returns the server interceptors that limit calls by the rules of
// a live policy set: every call yields the descriptors of
// [WithDescriptor], the set's rules map them to policies (plans resolved
// per key), and every matched policy is checked, all or nothing, through
// the admission core [New] uses, with the same response contract. A call no
// rule matches is not limited. The checks of dry-run policies never refuse:
// they are charged when the call is admitted, and reported in an event of
// their own ([floodgate.SourceShadow]: allowed, or would_deny with the
// dry-run policy's name), beside the call's event, which keeps the
// enforcing verdict. A reload of the set applies to the next call.
//
// It returns an error wrapping [floodgate.ErrInvalidConfig] when live is
// nil, no descriptor is given, or an option is nil or invalid.
func Policies(live middleware.Matcher, opts ...PoliciesOption) (*Interceptors, error) {
	if nilcheck.Is(live) {
		return nil, invalid("nil policy set")
	}
	cfg, err := buildConfig(true, opts, PoliciesOption.applyPolicies)
	if err != nil {
		return nil, err
	}
	var cost func(call) int
	if cfg.cost != nil {
		cost = func(q call) int { return q.c.cost(q.ctx, q.method) }
	}
	if len(cfg.descriptors) == 0 {
		return nil, invalid("Policies needs at least one WithDescriptor")
	}
	set, err := describe.New(live, cfg.descriptors, cost)
	if err != nil {
		return nil, err
	}
	acfg := admit.Config{Name: cfg.name, Tier: cfg.tier, Observer: cfg.observer, DryRun: cfg.dryRun,
		FailMode: cfg.failMode, DelayMode: cfg.delayMode}
	return &Interceptors{cfg: cfg, core: admit.NewDynamic(acfg), set: set}, nil
}

// admitPolicies decides one call of a Policies interceptor.
func (i *Interceptors) admitPolicies(ctx context.Context, ss grpc.ServerStream, method string, ev floodgate.Event, start int64) error {
	v, m := i.set.Decide(ctx, i.core, call{&i.cfg, ctx, method}, ev, start)
	var policy string
	if v.Kind == admit.Deny {
		policy = i.core.Deciding(m.Checks, v)
	}
	m.Release()
	return answer(ctx, ss, v, policy)
}
