package rls

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
)

// FailureMode says what ShouldRateLimit answers when the store cannot
// decide (Redis away, and the store's own failure policy returned the
// error).
type FailureMode int

const (
	// FailError answers the call with a gRPC Unavailable error, as the
	// reference does: Envoy's failure_mode_deny then decides. The default.
	FailError FailureMode = iota
	// FailOpen answers OK for every descriptor, with no current_limit,
	// limit_remaining or duration_until_reset and no rate-limit headers:
	// nothing that tells a client to slow down or wait.
	FailOpen
	// FailClosed answers OVER_LIMIT for every enforcing descriptor that has
	// a limit, with its current_limit, limit_remaining 0 and no
	// duration_until_reset (when the limit resets is unknown while the
	// store is away), and no rate-limit headers. Shadow-mode descriptors
	// answer OK, as they never refuse; unlimited and unknown ones OK.
	FailClosed
)

func (m FailureMode) String() string {
	switch m {
	case FailError:
		return "error"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "FailureMode(" + fmt.Sprint(int(m)) + ")"
}

// Option configures New.
type Option struct {
	apply func(*options) error
}

type options struct {
	observer  floodgate.Observer
	metrics   *Metrics
	headers   HeaderSet
	shadow    bool
	failure   FailureMode
	nearRatio float64
	onReload  func(Reload)
	now       func() time.Time
	secret    []byte
	logger    *slog.Logger
	// noHeaderNames: RateLimit-Policy members are named by position.
	noHeaderNames bool
}

// WithHeaderPolicyNames says how the members of RateLimit-Policy and
// RateLimit (HeadersIETF) are named, which end clients see. On (the
// default): a limit's rate_limit name when set, else "rl-" and a short
// stable hash of its config path, which tells nothing of the config. Off:
// by position, as floodgate's middleware names unnamed limits: "default"
// for the first member, "limit-2", "limit-3" for the next.
func WithHeaderPolicyNames(on bool) Option {
	return Option{func(c *options) error { c.noHeaderNames = !on; return nil }}
}

// WithLogger logs on l when the store stops deciding (Redis away: the
// failure mode, or redisstore's local fallback, answers) and when it
// decides again, once per transition, not per request.
func WithLogger(l *slog.Logger) Option {
	return Option{func(c *options) error {
		if l == nil {
			return fmt.Errorf("%w: rls: nil logger", floodgate.ErrInvalidConfig)
		}
		c.logger = l
		return nil
	}}
}

// WithObserver reports one event per ShouldRateLimit call that a limit
// decided to o: its Policy is the floodgate policy name of the limit that
// decided (the one with the fewest units left, or the refusing one), its
// Outcome allowed, denied, would_deny (a shadow limit over its limit),
// fallback (the Redis store's failure policy decided), or, when the store
// could not decide, error_open / error_closed (Policy "rls"; with
// FailError, error_open: Envoy's failure_mode_deny decides, false by
// default).
func WithObserver(o floodgate.Observer) Option {
	return Option{func(c *options) error {
		if o == nil {
			return fmt.Errorf("%w: rls: nil observer", floodgate.ErrInvalidConfig)
		}
		c.observer = o
		return nil
	}}
}

// WithMetrics counts every decision in m (see NewMetrics).
func WithMetrics(m *Metrics) Option {
	return Option{func(c *options) error {
		if m == nil {
			return fmt.Errorf("%w: rls: nil metrics", floodgate.ErrInvalidConfig)
		}
		c.metrics = m
		return nil
	}}
}

// WithHeaders adds the header groups of h to response_headers_to_add
// (default none, as the reference).
func WithHeaders(h HeaderSet) Option {
	return Option{func(c *options) error {
		if h&^(HeadersIETF|HeadersLegacy) != 0 {
			return fmt.Errorf("%w: rls: unknown header set %d", floodgate.ErrInvalidConfig, h)
		}
		c.headers = h
		return nil
	}}
}

// WithGlobalShadowMode answers OK overall whatever the limits say, as the
// reference's SHADOW_MODE setting (per-descriptor statuses still tell).
func WithGlobalShadowMode(on bool) Option {
	return Option{func(c *options) error { c.shadow = on; return nil }}
}

// WithFailureMode sets what is answered when the store cannot decide.
func WithFailureMode(m FailureMode) Option {
	return Option{func(c *options) error {
		if m < FailError || m > FailClosed {
			return fmt.Errorf("%w: rls: unknown failure mode %d", floodgate.ErrInvalidConfig, m)
		}
		c.failure = m
		return nil
	}}
}

// WithNearLimitRatio sets the share of a limit above which hits count as
// near_limit (default 0.8, the reference's NEAR_LIMIT_RATIO).
func WithNearLimitRatio(r float64) Option {
	return Option{func(c *options) error {
		if !(r > 0 && r <= 1) {
			return fmt.Errorf("%w: rls: near-limit ratio %v outside (0, 1]", floodgate.ErrInvalidConfig, r)
		}
		c.nearRatio = r
		return nil
	}}
}

// WithOnReload calls f after every config change applied or refused
// (Reload.Err set), from the goroutine that made it.
func WithOnReload(f func(Reload)) Option {
	return Option{func(c *options) error {
		if f == nil {
			return fmt.Errorf("%w: rls: nil reload callback", floodgate.ErrInvalidConfig)
		}
		c.onReload = f
		return nil
	}}
}

// WithKeySecret sets the secret of the keyed hash (HMAC-SHA256, 128 bits
// kept) that stands for a credential's value (a descriptor marked
// credential: true) in store keys and metrics: at least 16 bytes. Without
// it each Service draws a random one, so every process sharing a Redis
// must be given the same secret to share a credential's budget.
func WithKeySecret(secret []byte) Option {
	return Option{func(c *options) error {
		if len(secret) < 16 {
			return fmt.Errorf("%w: rls: a key secret of %d bytes (want at least 16)", floodgate.ErrInvalidConfig, len(secret))
		}
		c.secret = bytes.Clone(secret)
		return nil
	}}
}

// WithClock sets the clock that duration_until_reset of a fixed window
// counts from when the store did not say (a key at full capacity). The
// default is floodgate.SystemClock. For tests.
func WithClock(c floodgate.Clock) Option {
	return Option{func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: rls: nil clock", floodgate.ErrInvalidConfig)
		}
		o.now = c.Now
		return nil
	}}
}

// Reload describes one config change, applied or refused.
type Reload struct {
	// Version counts the configs applied, from 1.
	Version uint64
	// Source says where the config came from (a directory, "api").
	Source string
	// Domains lists the domains of the config (of the refused one when Err
	// is set).
	Domains []string
	// Policy is floodgate's account of the change (policies added,
	// removed, changed).
	Policy policy.Change
	// Err is set when the config was refused: the running one stays.
	Err error
}

// Service is an Envoy rate limit service (envoy.service.ratelimit.v3)
// deciding with floodgate on a store. Register it on a *grpc.Server with
// Register or rlspb.RegisterRateLimitServiceServer. It is safe for
// concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer

	store store.Store
	live  *policy.Live
	opts  options
	cur   atomic.Pointer[compiled]
	mu    sync.Mutex // serialises Update

	// ownSecret: credentials are hashed with a secret of this process.
	ownSecret bool

	ovMu      sync.Mutex
	overrides map[overrideKey]*lim

	// storeDown: the last call that reached the store was answered by a
	// failure policy (logged on each change).
	storeDown atomic.Bool
	// failN counts the store's failure-policy events (ObserveStore) by
	// outcome: open, closed, local.
	failN [3]atomic.Uint64
}

// ObserveStore takes the events of the store's own observer
// (redisstore.WithObserver): the decisions its failure policy made
// (FailOpen, FailClosed, Fallback). A redisstore.Store also marks each
// such decision it returns (floodgate.Decision.Fallback), single and group
// alike, and the service answers from that mark without ObserveStore;
// ObserveStore is for what a limiter does not pass on in its decisions. A
// call during which the store's failure policy decided is answered,
// counted and logged as such (a FailOpen or FailClosed store as this
// service's FailOpen or FailClosed, reported to the observer as
// error_open or error_closed).
func (s *Service) ObserveStore(e floodgate.Event) {
	switch e.Outcome {
	case floodgate.OutcomeErrorOpen:
		s.failN[0].Add(1)
	case floodgate.OutcomeErrorClosed:
		s.failN[1].Add(1)
	case floodgate.OutcomeFallback:
		s.failN[2].Add(1)
	}
}

// storeFailed records a call the store could not decide, answered by
// mode: counted, and logged when the store was deciding until now.
func (s *Service) storeFailed(mode string, err error) {
	if s.opts.metrics != nil {
		s.opts.metrics.storeUnavailable(mode)
	}
	if s.storeDown.CompareAndSwap(false, true) && s.opts.logger != nil {
		args := []any{"failure_mode", mode}
		if err != nil {
			args = append(args, "err", err)
		}
		s.opts.logger.Warn("rate limit store unavailable: answering by the failure mode until it is back", args...)
	}
}

// storeDecided records a call the store decided.
func (s *Service) storeDecided() {
	if s.storeDown.Load() && s.storeDown.CompareAndSwap(true, false) && s.opts.logger != nil {
		s.opts.logger.Info("rate limit store available again: deciding on it")
	}
}

// failAnswer is the answer of a call the store could not decide, by
// mode (FailOpen or FailClosed).
func (s *Service) failAnswer(ds []dstatus, mode FailureMode) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(ds))}
	for i := range ds {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		if lm := ds[i].lm; mode == FailClosed && lm != nil && !lm.unlimited && !lm.shadow {
			st.Code, st.CurrentLimit = rlspb.RateLimitResponse_OVER_LIMIT, lm.lims[0].pb
			if !s.opts.shadow {
				resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			}
		}
		resp.Statuses[i] = st
	}
	return resp
}

type overrideKey struct {
	rpu uint32
	w   time.Duration
}

// maxOverrides bounds the limiters kept for the requests' own limits.
const maxOverrides = 1024

// New returns a Service running cfg on s.
func New(s store.Store, cfg Config, opts ...Option) (*Service, error) {
	svc := &Service{store: s, overrides: map[overrideKey]*lim{}}
	svc.opts = options{nearRatio: 0.8, now: floodgate.SystemClock.Now}
	for i, o := range opts {
		if o.apply == nil {
			return nil, fmt.Errorf("%w: rls: option %d is the zero Option", floodgate.ErrInvalidConfig, i)
		}
		if err := o.apply(&svc.opts); err != nil {
			return nil, err
		}
	}
	svc.ownSecret = svc.opts.secret == nil
	if svc.opts.secret == nil {
		svc.opts.secret = make([]byte, 32)
		if _, err := rand.Read(svc.opts.secret); err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
	}
	c, err := compile(cfg)
	if err == nil {
		err = svc.checkSecret(c)
	}
	if err == nil {
		err = svc.checkLeases(c)
	}
	if err != nil {
		return nil, err
	}
	live, err := policy.NewLive(policy.Config{Policies: c.policies}, s)
	if err != nil {
		return nil, err
	}
	if err := c.bind(live.Set()); err != nil {
		live.Close(context.Background()) // its leases hold no tokens yet
		return nil, err
	}
	svc.live = live
	svc.cur.Store(c)
	if svc.opts.metrics != nil {
		svc.opts.metrics.configLoad(true)
	}
	return svc, nil
}

// checkSecret refuses credential descriptors hashed with this process's
// own secret on a store that several processes share: each node would
// keep its own budget per credential.
func (s *Service) checkSecret(c *compiled) error {
	if c.credential && s.ownSecret && store.IsShared(s.store) {
		return fmt.Errorf("%w: rls: credential descriptors on a store shared by several processes need WithKeySecret (-key-secret-file), the same secret on every node", floodgate.ErrInvalidConfig)
	}
	return nil
}

// checkLeases refuses leased limits on a store that does not grant
// leases (policy.NewLive and Live.Update refuse them too; this error
// names the file and line of the first one).
func (s *Service) checkLeases(c *compiled) error {
	if c.leasedAt == nil {
		return nil
	}
	if _, ok := s.store.(lease.Global); ok {
		return nil
	}
	e := *c.leasedAt
	e.Msg = fmt.Sprintf("leased needs a store shared by the fleet that grants leases (redisstore: floodgate-rls -redis or -redis-cluster), not %T", s.store)
	return &e
}

// Close gives back the tokens that the leased limits hold to their global
// buckets (policy.Live.Close), bounded by ctx and the store's timeout, and
// returns the errors of the give-back. Call it once the gRPC server has
// stopped serving (after GracefulStop): after Close a leased limit cannot
// decide (its calls are answered by the failure mode, as when the store
// is away), the other limits decide as before, and Update, ReloadDir and
// WatchDir's reloads are refused. A Service without leased limits has
// nothing to give back. Close is idempotent.
func (s *Service) Close(ctx context.Context) error { return s.live.Close(ctx) }

// Register registers the service on g.
func (s *Service) Register(g *grpc.Server) { rlspb.RegisterRateLimitServiceServer(g, s) }

// Domains returns the domains of the running config, sorted.
func (s *Service) Domains() []string {
	var out []string
	for d := range s.cur.Load().domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// Version returns the version of the running config (1 for the first).
func (s *Service) Version() uint64 { return s.live.Version() }

// Update makes cfg the running config, atomically: a request is decided
// wholly on the old config or wholly on the new one. A config that does not
// compile leaves the running one in place and is returned (a
// *policy.ConfigError with file:line where it comes from a file). A limit
// keeps its state across the change when its descriptor path stays (its
// floodgate policy name), by floodgate's live-change rule.
func (s *Service) Update(cfg Config, source string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Reload{Source: source}
	for _, d := range cfg.Domains {
		r.Domains = append(r.Domains, d.Name)
	}
	c, err := compile(cfg)
	if err == nil {
		err = s.checkSecret(c)
	}
	if err == nil {
		err = s.checkLeases(c)
	}
	if err == nil {
		r.Policy, err = s.live.Update(policy.Config{Policies: c.policies}, source)
	}
	if err == nil {
		err = c.bind(s.live.Set())
	}
	r.Version = s.live.Version()
	if err != nil {
		r.Err = err
		s.report(r)
		return err
	}
	s.cur.Store(c)
	s.report(r)
	return nil
}

func (s *Service) report(r Reload) {
	if s.opts.metrics != nil {
		s.opts.metrics.configLoad(r.Err == nil)
	}
	if s.opts.onReload != nil {
		s.opts.onReload(r)
	}
}

// ReloadDir loads the config directory dir (LoadDir) and applies it
// (Update); a directory that does not load leaves the running config.
func (s *Service) ReloadDir(dir string) error {
	cfg, err := LoadDir(dir)
	if err != nil {
		r := Reload{Source: dir, Err: err, Version: s.live.Version()}
		s.report(r)
		return err
	}
	return s.Update(cfg, dir)
}

// dstatus is what one request descriptor came to.
type dstatus struct {
	lm       *limit
	hits     int
	neg      bool
	checks   []floodgate.Check // one per lim (blocked ones too, Limiter nil)
	key      string            // the store key
	stats    string            // the metric key
	precheck bool              // refused before any store call (blocked, cost too large)
}

// ShouldRateLimit implements the Envoy rate limit service.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	c := s.cur.Load()
	root := c.domains[req.Domain]
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	ds := sc.statuses(len(req.Descriptors))
	var replacing map[string]bool // made when a limit replaces another
	ents := sc.ents[:0]
	for i, d := range req.Descriptors {
		if root == nil {
			break // unknown domain: no limit at all, the request's own ones included
		}
		ents = ents[:0]
		for _, e := range d.GetEntries() {
			ents = append(ents, entry{e.GetKey(), e.GetValue()})
		}
		var lm *limit
		if o := d.GetLimit(); o != nil {
			var err error
			if lm, err = s.override(req.Domain, o.GetRequestsPerUnit(), o.GetUnit().String(), o.GetUnitMultiplier().GetValue(), ents); err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
		} else {
			path := sc.path(len(ents))
			if n := lookup(root, ents, path); n != nil {
				lm = n.limit
				ds[i].key, ds[i].stats = s.keys(req.Domain, ents, path, lm)
			}
		}
		if lm == nil {
			continue
		}
		if ds[i].key == "" {
			ds[i].key = s.storeKey(req.Domain, ents, nil)
			ds[i].stats = lm.statsKey
		}
		for _, r := range lm.replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[r] = true
		}
		ds[i].lm = lm
		hits := uint64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		}
		ds[i].hits = int(min(hits, math.MaxInt32))
		ds[i].neg = d.GetIsNegativeHits()
	}
	for i := range ds {
		if lm := ds[i].lm; lm != nil && lm.name != "" && replacing[lm.name] {
			ds[i].lm = nil
		}
	}
	sc.ents = ents[:0]
	n0, n1, n2 := s.failN[0].Load(), s.failN[1].Load(), s.failN[2].Load()
	resp, lead, err := s.decide(ctx, req, ds, sc)
	if err == nil {
		// redisstore's FailOpen / FailClosed: a blanket answer with no
		// quota behind it, answered as this service's own failure modes.
		open := s.failN[0].Load() != n0 || (lead != nil && lead.Decision.Fallback && lead.Decision.Limit == 0 && lead.Decision.Allowed)
		closed := s.failN[1].Load() != n1 || (lead != nil && lead.Decision.Fallback && lead.Decision.Limit == 0 && !lead.Decision.Allowed)
		switch {
		case closed:
			s.storeFailed(FailClosed.String(), nil)
			s.observeFail(lead, floodgate.OutcomeErrorClosed, start)
			return s.failAnswer(ds, FailClosed), nil
		case open:
			s.storeFailed(FailOpen.String(), nil)
			s.observeFail(lead, floodgate.OutcomeErrorOpen, start)
			return s.failAnswer(ds, FailOpen), nil
		}
	}
	if err != nil {
		// FailError: Envoy decides, by default (failure_mode_deny false)
		// letting the request through.
		outcome := floodgate.OutcomeErrorOpen
		switch s.opts.failure {
		case FailOpen:
			resp = s.failAnswer(ds, FailOpen)
		case FailClosed:
			outcome = floodgate.OutcomeErrorClosed
			resp = s.failAnswer(ds, FailClosed)
		}
		if s.opts.observer != nil {
			s.opts.observer.Observe(floodgate.Event{Policy: "rls", Outcome: outcome, Err: err, Latency: time.Since(start)})
		}
		if s.opts.metrics != nil {
			s.opts.metrics.storeError()
		}
		s.storeFailed(s.opts.failure.String(), err)
		if resp == nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return resp, nil
	}
	outcome := floodgate.OutcomeAllowed
	if lead != nil {
		if lead.Decision.Fallback || s.failN[2].Load() != n2 {
			s.storeFailed("local", nil)
		} else {
			s.storeDecided()
		}
	}
	if s.opts.observer != nil && lead != nil {
		ev := floodgate.Event{Policy: direct(lead.Limiter).Name(), Decision: lead.Decision, Latency: time.Since(start), Outcome: outcome}
		switch {
		case lead.Decision.Fallback:
			ev.Outcome = floodgate.OutcomeFallback // the store's failure policy decided
		case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT:
			ev.Outcome = floodgate.OutcomeDenied
		case !lead.Decision.Allowed:
			ev.Outcome = floodgate.OutcomeWouldDeny
		}
		s.opts.observer.Observe(ev)
	}
	return resp, nil
}

// observeFail reports a call answered by the store's blanket FailOpen or
// FailClosed as this service's own fail mode is reported (the cause goes
// to the store's observer).
func (s *Service) observeFail(lead *floodgate.Check, outcome floodgate.Outcome, start time.Time) {
	if s.opts.observer == nil {
		return
	}
	ev := floodgate.Event{Policy: "rls", Outcome: outcome, Latency: time.Since(start)}
	if lead != nil {
		ev.Policy, ev.Decision = direct(lead.Limiter).Name(), lead.Decision
	}
	s.opts.observer.Observe(ev)
}

// override returns the limit of a request's own limit (the descriptor's
// "limit" field): a fixed window, with a limiter kept per (rate, window).
func (s *Service) override(domain string, rpu uint32, unit string, mult uint32, ents []entry) (*limit, error) {
	r := RateLimit{RequestsPerUnit: rpu, Unit: unit, UnitMultiplier: mult}
	w, err := r.Window()
	if err != nil {
		return nil, fmt.Errorf("the descriptor's limit: %w", err)
	}
	lm := &limit{statsKey: s.metricKey(domain, ents, nil, true)}
	k := overrideKey{rpu, w}
	s.ovMu.Lock()
	l, ok := s.overrides[k]
	s.ovMu.Unlock()
	if !ok {
		name := fmt.Sprintf("rls-override:%d/%s", rpu, w)
		l = &lim{policy: name, header: name, window: w, fixed: true, limit: int64(rpu), pb: currentLimit(rpu, w, "", mult)}
		pol, err := r.policy(name)
		if err != nil {
			return nil, fmt.Errorf("the descriptor's limit: %w", err)
		}
		if pol.Name == "" {
			l.blocked = true
		} else if l.l, err = pol.Limiter(s.store); err != nil {
			return nil, err
		}
		s.ovMu.Lock()
		if len(s.overrides) < maxOverrides {
			s.overrides[k] = l
		}
		s.ovMu.Unlock()
	}
	lm.lims = []lim{*l}
	return lm, nil
}

// keys returns the store key and the metric key of a descriptor whose
// entries matched the nodes of path, as the reference makes them: the
// store key holds every entry's value (a share_threshold wildcard's
// pattern instead, a credential's keyed hash); the metric key is the
// limit's config path, or the request's values for detailed_metric, or the
// config path with the values of value_to_metric levels.
func (s *Service) keys(domain string, ents []entry, path []*node, lm *limit) (key, stats string) {
	key = s.storeKey(domain, ents, path)
	vtm := false
	for i := range ents {
		if n := path[i]; n != nil && (n.vtm || n.share != "") {
			vtm = true
		}
	}
	switch {
	case lm.detailed:
		stats = s.metricKey(domain, ents, path, true)
	case vtm:
		stats = s.metricKey(domain, ents, path, false)
	default:
		stats = lm.statsKey
	}
	return key, stats
}

// storeKey is the key of a descriptor in the store: the domain and every
// entry, each part escaped so that no two descriptors share one.
func (s *Service) storeKey(domain string, ents []entry, path []*node) string {
	n := len(domain) + 8
	for _, e := range ents {
		n += len(e.key) + len(e.value) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, domain...)
	for i, e := range ents {
		b = append(b, '|')
		b = appendEscaped(b, e.key)
		b = append(b, '=')
		var nd *node
		if i < len(path) {
			nd = path[i]
		}
		switch {
		case nd != nil && nd.share != "":
			b = append(b, '*')
			b = appendEscaped(b, nd.share)
		case nd != nil && nd.cred:
			b = s.appendHash(b, e.value)
		default:
			b = appendEscaped(b, e.value)
		}
	}
	return string(b)
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '|' || c == '=' || c == '\\' || c == '#' || c == '*' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return b
}

// appendHash appends '#' and 128 bits of HMAC-SHA256(secret, v) in hex.
func (s *Service) appendHash(b []byte, v string) []byte {
	m := hmac.New(sha256.New, s.opts.secret)
	m.Write([]byte(v))
	var sum [sha256.Size]byte
	b = append(b, '#')
	return hex.AppendEncode(b, m.Sum(sum[:0])[:16])
}

// metricKey is the reference's metric key of a request: the domain, then
// per entry key_value (detailed, or a value_to_metric level), the
// wildcard pattern (a share_threshold level, or a wildcard level without
// value_to_metric), or what the config names the level; a credential's
// value as its keyed hash.
func (s *Service) metricKey(domain string, ents []entry, path []*node, detailed bool) string {
	b := []byte(domain)
	for i, e := range ents {
		b = append(b, '.')
		var nd *node
		if i < len(path) {
			nd = path[i]
		}
		switch {
		case nd != nil && nd.share != "":
			b = append(b, e.key...)
			b = append(b, '_')
			b = append(b, nd.share...)
		case detailed || nd == nil || nd.vtm:
			b = append(b, e.key...)
			if e.value != "" {
				b = append(b, '_')
				if nd != nil && nd.cred {
					b = s.appendHash(b, e.value)
				} else {
					b = append(b, e.value...)
				}
			}
		default:
			b = append(b, nd.kv...)
		}
	}
	return string(b)
}

// decide runs the checks of ds and writes the response. lead is the check
// that decided, for the observer.
func (s *Service) decide(ctx context.Context, req *rlspb.RateLimitRequest, ds []dstatus, sc *scratch) (*rlspb.RateLimitResponse, *floodgate.Check, error) {
	enforcing := sc.enforcing[:0]
	defer func() { sc.enforcing = enforcing[:0] }()
	var quotaGroups map[string]bool // group -> over, made for quota-mode descriptors
	// Build every descriptor's checks.
	for i := range ds {
		d := &ds[i]
		if d.lm == nil || d.lm.unlimited {
			continue
		}
		key := d.key
		d.checks = sc.checks(len(d.lm.lims))
		for j := range d.lm.lims {
			l := &d.lm.lims[j]
			d.checks[j] = floodgate.Check{Key: key, N: d.hits}
			if l.l != nil {
				d.checks[j].Limiter = l.decider()
				if d.hits > 0 && int64(d.hits) > l.l.Capacity() {
					d.precheck = true
				}
			} else if d.hits > 0 {
				d.precheck = true // blocked
			}
		}
	}
	// Negative hits give back; zero hits only look.
	for i := range ds {
		d := &ds[i]
		if d.checks == nil || !(d.neg || d.hits == 0) {
			continue
		}
		for j := range d.checks {
			ch := &d.checks[j]
			if ch.Limiter == nil {
				ch.Decision = floodgate.Decision{Allowed: d.neg} // blocked: nothing is ever left
				continue
			}
			l := direct(ch.Limiter) // a leased limit's refund and look go to its global bucket
			if d.neg && d.hits > 0 {
				if err := l.Refund(ctx, ch.Key, d.hits); err != nil {
					return nil, nil, err
				}
			}
			dec, err := l.Peek(ctx, ch.Key)
			if err != nil {
				return nil, nil, err
			}
			// Looking: over the limit when no unit is left (a counted hit
			// would be refused); a refund is always allowed.
			dec.Allowed = d.neg || dec.Remaining > 0
			ch.Decision = dec
		}
	}
	// A request over a limit it only looks at is refused: it charges
	// nothing elsewhere either.
	refusedEarly := false
	for i := range ds {
		d := &ds[i]
		if d.checks == nil || d.neg || d.hits != 0 || d.lm.shadow || d.lm.quota {
			continue
		}
		for j := range d.checks {
			if !d.checks[j].Decision.Allowed {
				refusedEarly = true
			}
		}
	}
	// Quota-mode descriptors: each decided on its own.
	for i := range ds {
		d := &ds[i]
		if d.checks == nil || d.neg || d.hits == 0 || !d.lm.quota {
			continue
		}
		ok, err := s.take(ctx, d.checks, !d.precheck)
		if err != nil {
			return nil, nil, err
		}
		g := quotaGroupKey(req.Descriptors[i].GetEntries())
		if quotaGroups == nil {
			quotaGroups = map[string]bool{}
		}
		prev, seen := quotaGroups[g]
		quotaGroups[g] = !ok || (seen && prev)
	}
	quotaOver := len(quotaGroups) > 0
	for _, over := range quotaGroups {
		if !over {
			quotaOver = false
		}
	}
	// The enforcing descriptors: all or nothing.
	for i := range ds {
		d := &ds[i]
		if d.checks == nil || d.neg || d.hits == 0 || d.lm.quota || d.lm.shadow {
			continue
		}
		if d.precheck {
			refusedEarly = true
		}
		enforcing = append(enforcing, d.checks...)
	}
	admitted := true
	if len(enforcing) > 0 {
		ok, err := s.take(ctx, enforcing, !refusedEarly && !quotaOver)
		if err != nil {
			return nil, nil, err
		}
		admitted = ok && !refusedEarly
		// Copy the decisions back.
		k := 0
		for i := range ds {
			d := &ds[i]
			if d.checks == nil || d.neg || d.hits == 0 || d.lm.quota || d.lm.shadow {
				continue
			}
			copy(d.checks, enforcing[k:k+len(d.checks)])
			k += len(d.checks)
		}
	}
	// Shadow descriptors: charged when the request is admitted.
	for i := range ds {
		d := &ds[i]
		if d.checks == nil || d.neg || d.hits == 0 || !d.lm.shadow || d.lm.quota {
			continue
		}
		if _, err := s.take(ctx, d.checks, admitted && !quotaOver && !d.precheck); err != nil {
			return nil, nil, err
		}
	}
	// Statuses.
	resp := &rlspb.RateLimitResponse{Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(ds))}
	overall := rlspb.RateLimitResponse_OK
	var lead *floodgate.Check
	var leadSt *rlspb.RateLimitResponse_DescriptorStatus
	now := s.opts.now()
	for i := range ds {
		d := &ds[i]
		switch {
		case d.lm == nil:
			resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
			continue
		case d.lm.unlimited:
			resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		j := pick(d.checks)
		ch, l := &d.checks[j], &d.lm.lims[j]
		dec := ch.Decision
		over := false
		for k := range d.checks {
			if !d.checks[k].Decision.Allowed {
				over = true
			}
		}
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, CurrentLimit: l.pb}
		if over {
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		} else {
			st.LimitRemaining = uint32(min(max(dec.Remaining, 0), math.MaxUint32))
		}
		st.DurationUntilReset = durationpb.New(resetOf(l, dec, over, now))
		if s.opts.metrics != nil && !d.neg && d.hits > 0 {
			// Charged: quota-mode descriptors each when they admit, the
			// others when the request is admitted.
			s.opts.metrics.record(req.Domain, d.stats, d.checks, d.lm, d.hits, s.opts.nearRatio, d.lm.quota || (admitted && !quotaOver))
		}
		if over && d.lm.shadow {
			st.Code = rlspb.RateLimitResponse_OK
		}
		if st.Code == rlspb.RateLimitResponse_OVER_LIMIT && !d.lm.quota {
			overall = rlspb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[i] = st
		// The lead: a refusal first, then the fewest left.
		if lead == nil || (over && !lead.Decision.Allowed && dec.RetryAfter > lead.Decision.RetryAfter) ||
			(over && lead.Decision.Allowed) || (!over && lead.Decision.Allowed && dec.Remaining < lead.Decision.Remaining) {
			if ch.Limiter != nil {
				lead = ch
			}
			leadSt = st
		}
	}
	if quotaOver {
		overall = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if overall == rlspb.RateLimitResponse_OVER_LIMIT && s.opts.shadow {
		overall = rlspb.RateLimitResponse_OK
	}
	resp.OverallCode = overall
	if s.opts.headers != 0 && leadSt != nil {
		var capacity int64
		if lead != nil {
			capacity = direct(lead.Limiter).Capacity()
		}
		resp.ResponseHeadersToAdd = s.headers(ds, leadSt, capacity, overall == rlspb.RateLimitResponse_OVER_LIMIT)
	}
	return resp, lead, nil
}

// take decides checks all or nothing: charged when commit, else only
// evaluated. Checks without a limiter (blocked limits) refuse.
func (s *Service) take(ctx context.Context, checks []floodgate.Check, commit bool) (bool, error) {
	var group []floodgate.Check
	blocked := false
	for i := range checks {
		if checks[i].Limiter == nil {
			checks[i].Decision = floodgate.Decision{}
			blocked = true
		}
	}
	if blocked {
		commit = false
	}
	group = checks
	if commit {
		if _, err := floodgate.TakeAll(ctx, group); err != nil {
			if errors.Is(err, floodgate.ErrInvalidCost) {
				return s.evaluate(ctx, checks)
			}
			return false, err
		}
		for i := range group {
			if !group[i].Decision.Allowed {
				return false, nil
			}
		}
		return true, nil
	}
	ok, err := s.evaluate(ctx, checks)
	return ok && !blocked, err
}

// evaluate tells what checks would decide, changing nothing.
func (s *Service) evaluate(ctx context.Context, checks []floodgate.Check) (bool, error) {
	var fit []floodgate.Check
	var idx []int
	all := true
	for i := range checks {
		ch := &checks[i]
		if ch.Limiter == nil {
			all = false
			continue
		}
		if lz, ok := ch.Limiter.(*leased); ok {
			// A leased limit answers from this node's lease when it has
			// one, as the request would have been decided.
			if d, ok := lz.Look(ch.Key, ch.N); ok {
				ch.Decision = d
				all = all && d.Allowed
				continue
			}
		}
		l := direct(ch.Limiter) // a leased limit without a lease here: its global bucket
		if int64(ch.N) > l.Capacity() {
			d, err := l.Peek(ctx, ch.Key)
			if err != nil {
				return false, err
			}
			d.Allowed = false
			ch.Decision = d
			all = false
			continue
		}
		fit = append(fit, *ch)
		fit[len(fit)-1].Limiter = l
		idx = append(idx, i)
	}
	if len(fit) == 0 {
		return all, nil
	}
	l := fit[0].Limiter.(*store.Limiter)
	ok, err := l.TakeGroup(ctx, fit, false)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, fmt.Errorf("rls: the store could not evaluate the group")
	}
	for k, i := range idx {
		dec := fit[k].Decision
		if ok {
			// An admitting evaluation tells the state after a commit; what
			// was not charged is the state before it.
			dec.Remaining = min(dec.Remaining+int64(fit[k].N), max(dec.Limit, dec.Remaining))
		}
		checks[i].Decision = dec
		if !dec.Allowed {
			all = false
		}
	}
	return all, nil
}

// pick returns the index of the check that stands for a descriptor: the
// refusing one with the longest wait, else the one with the fewest left.
func pick(checks []floodgate.Check) int {
	best := 0
	for i := 1; i < len(checks); i++ {
		a, b := checks[i].Decision, checks[best].Decision
		switch {
		case !a.Allowed && b.Allowed:
			best = i
		case !a.Allowed && !b.Allowed && a.RetryAfter > b.RetryAfter:
			best = i
		case a.Allowed && b.Allowed && a.Remaining < b.Remaining:
			best = i
		}
	}
	return best
}

// resetOf is a descriptor's duration_until_reset in whole seconds, rounded
// up as the reference's (window - now % window): for a fixed window the end
// of the window holding now; for the other algorithms the wait on a
// refusal, else the time until full.
func resetOf(l *lim, d floodgate.Decision, over bool, now time.Time) time.Duration {
	var r time.Duration
	switch {
	case l.fixed || l.blocked:
		r = d.ResetAfter
		if over && d.RetryAfter > 0 {
			r = d.RetryAfter
		}
		if r == 0 && l.window > 0 {
			r = l.window - time.Duration(now.UnixNano()%int64(l.window))
		}
	case over:
		r = d.RetryAfter
	default:
		r = d.ResetAfter
	}
	return (r + time.Second - 1) / time.Second * time.Second
}

// quotaGroupKey groups quota-mode descriptors as the reference does: by
// their backend_name and model_name_override entries when they have them,
// else by all their entries.
func quotaGroupKey(es []*ratelimitpb.RateLimitDescriptor_Entry) string {
	var backend, model, all string
	for _, e := range es {
		switch e.GetKey() {
		case "backend_name":
			backend = e.GetValue()
		case "model_name_override":
			model = e.GetValue()
		}
		all += e.GetKey() + "=" + e.GetValue() + ";"
	}
	if backend != "" || model != "" {
		return backend + "|" + model
	}
	return all
}

// scratch holds the buffers of one call, pooled.
type scratch struct {
	ds        []dstatus
	nodes     []*node
	ents      []entry
	enforcing []floodgate.Check
	backing   []floodgate.Check
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{ents: make([]entry, 0, 8), enforcing: make([]floodgate.Check, 0, 8), backing: make([]floodgate.Check, 0, 8)}
}}

// path returns n cleared node slots for lookup.
func (sc *scratch) path(n int) []*node {
	if cap(sc.nodes) < n {
		sc.nodes = make([]*node, n)
	}
	p := sc.nodes[:n]
	clear(p)
	return p
}

func (sc *scratch) statuses(n int) []dstatus {
	if cap(sc.ds) < n {
		sc.ds = make([]dstatus, n)
	}
	sc.ds = sc.ds[:n]
	clear(sc.ds)
	return sc.ds
}

// checks returns n zeroed checks from the backing buffer (a full buffer
// is left to the descriptors that hold it and a new one started).
func (sc *scratch) checks(n int) []floodgate.Check {
	if cap(sc.backing)-len(sc.backing) < n {
		sc.backing = make([]floodgate.Check, 0, max(8, 2*n))
	}
	k := len(sc.backing)
	sc.backing = sc.backing[:k+n]
	out := sc.backing[k : k+n : k+n]
	clear(out)
	return out
}

func (sc *scratch) release() {
	if len(sc.ds) > 64 || cap(sc.backing) > 256 {
		return // an outsized call: let its buffers go
	}
	clear(sc.backing[:cap(sc.backing)])
	sc.backing = sc.backing[:0]
	clear(sc.ds)
	clear(sc.enforcing[:cap(sc.enforcing)])
	scratchPool.Put(sc)
}
