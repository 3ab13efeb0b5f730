package grpclimit

import (
	"context"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/policy"
)

// Source is one entry of a call descriptor: a key (as the policy set's rules
// name it) and where its value comes from. Build one with [PeerEntry],
// [HeaderEntry], [MethodEntry] or [ValueEntry].
type Source struct {
	key        string
	credential bool
	value      func(c *config, ctx context.Context, method string) string
}

// PeerEntry is the entry key = the call's peer (its IP, aggregated by
// [WithIPPrefix]: IPv6 by /64 by default); envoy's "remote_address".
func PeerEntry(key string) Source {
	return Source{key: key, value: func(c *config, ctx context.Context, _ string) string { return c.peerKey(ctx) }}
}

// HeaderEntry is the entry key = the first value of metadata entry name (a
// service token, an API key). The value is a credential: matched and
// resolved to its plan in clear, stored only as a keyed hash
// (policy.WithKeySecret). A call without the entry does not yield the
// descriptor.
func HeaderEntry(name, key string) Source {
	return Source{key: key, credential: true, value: func(_ *config, ctx context.Context, _ string) string {
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 {
			return v[0]
		}
		return ""
	}}
}

// MethodEntry is the entry key = the call's full method
// ("/package.Service/Method").
func MethodEntry(key string) Source {
	return Source{key: key, value: func(_ *config, _ context.Context, method string) string { return method }}
}

// ValueEntry is the entry key = f(ctx, method); "" means the call does not
// yield the descriptor. Mark credentials: they are stored only as a keyed
// hash.
func ValueEntry(key string, credential bool, f func(ctx context.Context, method string) string) Source {
	return Source{key: key, credential: credential, value: func(_ *config, ctx context.Context, method string) string { return f(ctx, method) }}
}

// WithDescriptor adds a descriptor that every call yields to [Policies]:
// its entries, in order. A call for which an entry has no value does not
// yield that descriptor. It applies to Policies.
func WithDescriptor(entries ...Source) Option {
	return option("WithDescriptor", ctorPolicies, func(c *config) error {
		if len(entries) == 0 {
			return invalid("WithDescriptor without entries")
		}
		for i, e := range entries {
			if e.value == nil || e.key == "" {
				return invalid("WithDescriptor: entry %d is the zero Source or has no key", i)
			}
		}
		c.descriptors = append(c.descriptors, append([]Source(nil), entries...))
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
// nil, no descriptor is given, or an option is invalid or does not apply.
func Policies(live *policy.Live, opts ...Option) (*Interceptors, error) {
	if nilcheck.Is(live) {
		return nil, invalid("nil policy set")
	}
	cfg, err := buildConfig(ctorPolicies, opts)
	if err != nil {
		return nil, err
	}
	if len(cfg.descriptors) == 0 {
		return nil, invalid("Policies needs at least one WithDescriptor")
	}
	for _, d := range cfg.descriptors {
		for _, src := range d {
			if src.credential {
				if err := live.CheckCredentials(); err != nil {
					return nil, err
				}
			}
		}
	}
	acfg := admit.Config{Name: cfg.name, Tier: cfg.tier, Observer: cfg.observer, DryRun: cfg.dryRun}
	if cfg.failMode == FailClosed {
		acfg.FailMode = admit.FailClosed
	}
	if cfg.delayMode == DelayRefuse {
		acfg.DelayMode = admit.DelayRefuse
	}
	return &Interceptors{cfg: cfg, core: admit.NewDynamic(acfg), live: live}, nil
}

// admitPolicies decides one call of a Policies interceptor.
func (i *Interceptors) admitPolicies(ctx context.Context, method string, ev floodgate.Event, start int64) admit.Verdict {
	checks, enforcing, err := i.matchPolicies(ctx, method)
	if err != nil {
		return i.core.DecideChecks(ctx, []floodgate.Check{{Limiter: failing{err}, N: 1}}, nil, ev, start)
	}
	return i.core.DecideChecks(ctx, checks[:enforcing], checks[enforcing:], ev, start)
}

// matchPolicies builds the call's descriptors and matches them, turning a
// panicking source, cost function or resolver into an error.
func (i *Interceptors) matchPolicies(ctx context.Context, method string) (checks []floodgate.Check, enforcing int, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: grpclimit: a descriptor, cost or resolver function: %v", ErrLimiterPanic, p)
		}
	}()
	n := 1
	if i.cfg.cost != nil {
		n = i.cfg.cost(ctx, method)
	}
	descs := make([]policy.Descriptor, 0, len(i.cfg.descriptors))
	for _, srcs := range i.cfg.descriptors {
		d := make(policy.Descriptor, 0, len(srcs))
		for _, s := range srcs {
			v := s.value(&i.cfg, ctx, method)
			if v == "" {
				d = nil
				break
			}
			d = append(d, policy.Entry{Key: s.key, Value: v, Credential: s.credential})
		}
		if d != nil {
			descs = append(descs, d)
		}
	}
	return i.live.Match(ctx, descs, n, nil)
}

// failing is the limiter of a call whose checks could not be built: it
// reports err, which the core judges by the fail mode.
type failing struct{ err error }

func (f failing) Take(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{}, f.err
}
