package main

import (
	"context"
	"errors"
	"strings"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store"
)

// compileEnvoy sets a replay through an envoyproxy/ratelimit config: every
// line's descriptors (-descriptor) asked of the rls service, as Envoy asks
// it, in the config's domain.
func (rp *replayer) compileEnvoy(f *configFile, s store.Store) error {
	if len(rp.descs) == 0 || rp.o.policy != "" {
		return errors.New("an envoyproxy/ratelimit config is replayed through its descriptors: give -descriptor, not -policy")
	}
	d := f.Envoy
	d.Descriptors = unleased(d.Descriptors)
	svc, err := rls.New(s, rls.Config{Domains: []rls.Domain{d}})
	if err != nil {
		return err
	}
	for _, l := range f.limits() {
		rp.dryRun[l.Name] = l.DryRun
		rp.res.Policies = append(rp.res.Policies, policyReplay{Name: l.Name, Policy: l.Name + ": " + l.Desc, DryRun: l.DryRun})
	}
	rp.res.Mode = "descriptors, domain " + d.Name
	req := &rlspb.RateLimitRequest{Domain: d.Name}
	rp.decideLine = func(ctx context.Context, _ string, n int) (verdict, string, error) {
		req.Descriptors = req.Descriptors[:0]
		for _, dt := range rp.descs {
			x := &ratelimitpb.RateLimitDescriptor{}
			var buf []byte
			ok := true
			for i, k := range dt.keys {
				buf, ok = dt.vals[i].render(buf[:0], rp.r)
				if !ok {
					break
				}
				x.Entries = append(x.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: string(buf)})
			}
			if ok {
				req.Descriptors = append(req.Descriptors, x)
			}
		}
		if len(req.Descriptors) == 0 {
			return vUnlimited, "", nil
		}
		req.HitsAddend = uint32(n)
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			return vAllowed, "", err
		}
		limited := false
		for i, st := range resp.Statuses {
			if st.GetCode() == rlspb.RateLimitResponse_OVER_LIMIT {
				return vRefused, describe(req.Descriptors[i]), nil
			}
			limited = limited || st.GetCurrentLimit() != nil
		}
		if !limited {
			return vUnlimited, "", nil
		}
		return vAllowed, "", nil
	}
	return nil
}

// describe names a descriptor by its entries ("remote_address=10.0.0.1").
func describe(d *ratelimitpb.RateLimitDescriptor) string {
	var b strings.Builder
	for i, e := range d.Entries {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(e.Key + "=" + e.Value)
	}
	return b.String()
}

// unleased returns the descriptors with their limits' leases removed: a
// lease decides on its global bucket's tokens, which the replay decides
// directly.
func unleased(ds []rls.Descriptor) []rls.Descriptor {
	out := make([]rls.Descriptor, len(ds))
	for i, d := range ds {
		if d.RateLimit != nil {
			r := *d.RateLimit
			r.Leased, r.LeaseRefresh = false, 0
			d.RateLimit = &r
		}
		rl := make([]rls.RateLimit, len(d.RateLimits))
		for j, r := range d.RateLimits {
			r.Leased, r.LeaseRefresh = false, 0
			rl[j] = r
		}
		d.RateLimits = rl
		d.Descriptors = unleased(d.Descriptors)
		out[i] = d
	}
	return out
}
