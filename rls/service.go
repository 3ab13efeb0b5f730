package rls

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/internal/credkey"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
)

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

	// core judges a request's enforcing descriptors (dry run in the global
	// shadow mode) and reports its events; dry, a dry-run core, the
	// quota-mode and shadow-mode descriptors'.
	core, dry *admit.Core

	// over is the over-limit cache (nil: WithOverLimitCache not set).
	over *overCache
	// hash stands for credentials' values in keys.
	hash *credkey.Hasher

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

type overrideKey struct {
	rpu uint32
	w   time.Duration
}

// maxOverrides bounds the limiters kept for the requests' own limits.
const maxOverrides = 1024

// New returns a Service running cfg on s.
func New(s store.Store, cfg Config, opts ...Option) (*Service, error) {
	svc := &Service{store: s, overrides: map[overrideKey]*lim{}}
	svc.opts = options{nearRatio: 0.8, now: monotime.Clock{}.Now, failure: middleware.FailError}
	for i, o := range opts {
		if o.apply == nil {
			return nil, fmt.Errorf("%w: rls: option %d is the zero Option", floodgate.ErrInvalidConfig, i)
		}
		if err := o.apply(&svc.opts); err != nil {
			return nil, err
		}
	}
	svc.core, svc.dry = svc.opts.cores()
	svc.ownSecret = svc.opts.secret == nil
	svc.hash = credkey.New(svc.opts.secret, "#") // nil: the process's random secret
	if svc.opts.overCache > 0 {
		svc.over = newOverCache(svc.opts.overCache)
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
	s.over.clear() // a limit may have been raised
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
