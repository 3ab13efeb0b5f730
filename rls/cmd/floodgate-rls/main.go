// Command floodgate-rls runs an Envoy rate limit service
// (envoy.service.ratelimit.v3) on floodgate: envoyproxy/ratelimit's config
// files, unchanged, decided by floodgate's algorithms on its embedded memory
// store or on Redis / Redis Cluster.
//
//	go run ./rls/cmd/floodgate-rls -config ./ratelimit -addr :8081 -metrics :9090
//	go run ./rls/cmd/floodgate-rls -config ./ratelimit -redis 127.0.0.1:6379
//	go run ./rls/cmd/floodgate-rls -config ./ratelimit -redis-cluster 10.0.0.1:7000,10.0.0.2:7000
//
// It starts even when Redis is down, answering by -redis-failure until
// Redis answers (the client, of a node or a Cluster, is made in the
// background: redisstore.Dial).
//
// It reloads the config directory on every change (a bad file is refused,
// logged with file:line, and the running config stays), serves the gRPC
// health service (SERVING once a config is loaded, NOT_SERVING while
// shutting down), Prometheus metrics on -metrics at /metrics, reloads the
// config directory on SIGHUP, and stops gracefully on SIGINT or SIGTERM:
// the health turns NOT_SERVING, calls are still served for -shutdown-drain
// (2s), then in-flight calls finish, within -shutdown-timeout, the leased
// limits give back the tokens their leases hold, and "stopped" is logged.
// -version prints the command's module version and the library's.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "floodgate-rls:", err)
		os.Exit(1)
	}
}

// versionLine names the command's module version and the floodgate
// library's, as the build recorded them: "floodgate-rls v0.1.0 (floodgate
// v0.1.0)" when installed with go install ...@v0.1.0, "(devel)" when built
// from a checkout.
func versionLine() string {
	v, lib := "(devel)", "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, d := range bi.Deps {
			if d.Path == "github.com/floodgate-go/floodgate" {
				lib = d.Version
				if d.Replace != nil {
					lib += " => " + d.Replace.Path
				}
			}
		}
	}
	return "floodgate-rls " + v + " (floodgate " + lib + ")"
}

// run is the command: it returns when ctx ends (after a graceful
// shutdown) or on an error. ready, when not nil, receives the gRPC address
// and then the metrics address ("" when off) once both listen.
func run(ctx context.Context, args []string, logw io.Writer, ready chan<- [2]string) error {
	// SIGHUP reloads the config directory (the watch aside); caught from
	// the start, so that one sent during startup does not kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	f, err := parseFlags(args, logw)
	if err != nil {
		return err
	}
	if f.version {
		fmt.Println(versionLine())
		return nil
	}
	log := slog.New(slog.NewTextHandler(logw, nil))
	opts, err := f.options()
	if err != nil {
		return err
	}
	// The store's failure-policy events reach the service once it exists.
	var svcp atomic.Pointer[rls.Service]
	storeEvents := floodgate.ObserverFunc(func(e floodgate.Event) {
		if s := svcp.Load(); s != nil {
			s.ObserveStore(e)
		}
	})
	st, closeStore, err := openStore(f.redisAddr, f.redisCluster, f.redisPrefix, f.redisTimeout, f.redisFailure, f.nodes, storeEvents, log)
	if err != nil {
		return err
	}
	defer closeStore()
	reg := prometheus.NewRegistry()
	svc, err := f.service(st, opts, reg, log)
	if err != nil {
		return err
	}
	svcp.Store(svc)
	// closeLeases gives back what the leased limits hold, on every return
	// (bounded by -shutdown-timeout), before the store's client closes.
	closeLeases := sync.OnceFunc(func() {
		cctx, cancel := context.WithTimeout(context.Background(), f.shutdownAfter)
		defer cancel()
		if err := svc.Close(cctx); err != nil {
			log.Warn("leases not all given back: the tokens they held return as their buckets refill", "err", err)
		}
	})
	defer closeLeases()
	if f.watch {
		if err := svc.WatchDir(ctx, f.configDir); err != nil {
			return err
		}
	}
	srv, err := listen(f, svc, reg, log)
	if err != nil {
		return err
	}
	if ready != nil {
		ready <- srv.addrs
	}
	if err := srv.wait(ctx, hup, svc, f.configDir, log); err != nil {
		return err
	}
	if err := srv.shutdown(f, log); err != nil {
		return err
	}
	// No call is in flight any more: the leased limits give the tokens
	// their leases hold back to Redis, for the other nodes to spend.
	closeLeases()
	srv.stopMetrics(f.shutdownAfter)
	log.Info("stopped")
	return nil
}

// flags are the command's flags; set holds those given on the command
// line.
type flags struct {
	configDir, addr, metricsAddr                         string
	redisAddr, redisCluster, redisPrefix                 string
	redisTimeout                                         time.Duration
	redisFailure                                         string
	nodes, overCache                                     int
	headers, secretFile                                  string
	headerNames, shadow, watch, quota, metadata, version bool
	shutdownAfter, drain                                 time.Duration
	set                                                  map[string]bool
}

// parseFlags parses and checks args.
func parseFlags(args []string, logw io.Writer) (*flags, error) {
	fs := flag.NewFlagSet("floodgate-rls", flag.ContinueOnError)
	fs.SetOutput(logw)
	f := &flags{set: map[string]bool{}}
	fs.StringVar(&f.configDir, "config", "", "the config directory: one envoyproxy/ratelimit YAML file per domain (required)")
	fs.StringVar(&f.addr, "addr", ":8081", "the gRPC address")
	fs.StringVar(&f.metricsAddr, "metrics", "", "the address of the Prometheus /metrics endpoint (empty: none)")
	fs.StringVar(&f.redisAddr, "redis", "", "a Redis node (host:port); default: the embedded memory store")
	fs.StringVar(&f.redisCluster, "redis-cluster", "", "Redis Cluster nodes, comma-separated")
	fs.StringVar(&f.redisPrefix, "redis-prefix", "floodgate-rls:", "the prefix of the keys written to Redis")
	fs.DurationVar(&f.redisTimeout, "redis-timeout", 50*time.Millisecond, "the timeout of one Redis decision")
	fs.StringVar(&f.redisFailure, "redis-failure", "local", "when Redis is away: local (decide on a local memory store, every limit's rate and capacity divided by -nodes), error (the call fails, Envoy's failure_mode_deny decides: Envoy's default admits), open (OK, with no limit and no headers), or closed (OVER_LIMIT, with no reset time)")
	fs.IntVar(&f.nodes, "nodes", 1, "with -redis-failure local: the number of floodgate-rls processes sharing the limits (leased limits count them by heartbeats)")
	fs.StringVar(&f.headers, "headers", "", "response headers for Envoy to add, comma-separated: ietf (RateLimit-Policy, RateLimit), legacy (X-RateLimit-*), reference (RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset as envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED)")
	fs.BoolVar(&f.headerNames, "header-policy-names", true, "with -headers ietf: name RateLimit-Policy members by the rate_limit's name, else a short hash (never the config path); false: by position (default, limit-2, ...)")
	fs.BoolVar(&f.shadow, "shadow", false, "global shadow mode: answer OK whatever the limits say")
	fs.BoolVar(&f.quota, "quota-mode", false, "global quota mode (the reference's QUOTA_MODE): a descriptor over its limit answers OK and never refuses the request")
	fs.BoolVar(&f.metadata, "response-dynamic-metadata", false, "set dynamic_metadata on every response (the reference's RESPONSE_DYNAMIC_METADATA)")
	fs.IntVar(&f.overCache, "over-limit-cache", 0, "keep up to this many keys known over their limit in memory until their limit admits again, answering them without Redis (the reference's LOCAL_CACHE_SIZE_IN_BYTES, in keys; 0: none)")
	fs.BoolVar(&f.watch, "watch", true, "reload the config directory when it changes")
	fs.StringVar(&f.secretFile, "key-secret-file", "", "a file holding the secret (at least 16 bytes) of the hash that stands for credentials (descriptors with credential: true); every process sharing a Redis needs the same; default: a random one per process")
	fs.DurationVar(&f.shutdownAfter, "shutdown-timeout", 10*time.Second, "how long in-flight calls may take at shutdown, and then the leased limits to give back what their leases hold")
	fs.DurationVar(&f.drain, "shutdown-drain", 2*time.Second, "at shutdown, how long the gRPC health says NOT_SERVING while calls are still served, before the server stops taking new ones (for Envoy's health checks to move away)")
	fs.BoolVar(&f.version, "version", false, "print the command's version and the floodgate library's, and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if f.version {
		return f, nil
	}
	if f.configDir == "" {
		return nil, errors.New("-config is required")
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := checkFlags(f.set, f.redisAddr, f.redisCluster, f.redisTimeout, f.redisFailure, f.nodes, f.shutdownAfter); err != nil {
		return nil, err
	}
	if f.drain < 0 {
		return nil, fmt.Errorf("-shutdown-drain %v: want 0 or more", f.drain)
	}
	if f.overCache < 0 {
		return nil, fmt.Errorf("-over-limit-cache %d: want 0 or more", f.overCache)
	}
	return f, nil
}

// headerSet parses -headers.
func headerSet(list string) (middleware.HeaderSet, error) {
	var hs middleware.HeaderSet
	for _, h := range strings.Split(list, ",") {
		switch strings.TrimSpace(h) {
		case "":
		case "ietf":
			hs |= middleware.HeadersIETF
		case "legacy":
			hs |= middleware.HeadersLegacy
		case "reference":
			hs |= middleware.HeadersReference
		default:
			return 0, fmt.Errorf("-headers: unknown group %q (want ietf, legacy, reference)", h)
		}
	}
	return hs, nil
}

// options are the service's options the flags set (the logger, metrics
// and reload callback aside).
func (f *flags) options() ([]rls.Option, error) {
	hs, err := headerSet(f.headers)
	if err != nil {
		return nil, err
	}
	opts := []rls.Option{rls.WithHeaders(hs), rls.WithGlobalShadowMode(f.shadow), rls.WithHeaderPolicyNames(f.headerNames),
		rls.WithGlobalQuotaMode(f.quota), rls.WithDynamicMetadata(f.metadata), rls.WithOverLimitCache(f.overCache)}
	if f.secretFile != "" {
		b, err := os.ReadFile(f.secretFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, rls.WithKeySecret(bytes.TrimSpace(b)))
	}
	switch f.redisFailure {
	case "open":
		opts = append(opts, rls.WithFailMode(middleware.FailOpen))
	case "closed":
		opts = append(opts, rls.WithFailMode(middleware.FailClosed))
	}
	return opts, nil
}

// storeName names the store and its failure mode for the log.
func (f *flags) storeName() (name, failure string) {
	switch {
	case f.redisAddr != "":
		return "redis " + f.redisAddr, f.redisFailure
	case f.redisCluster != "":
		return "redis-cluster " + f.redisCluster, f.redisFailure
	}
	return "memory", "none (the memory store cannot fail)"
}

// service loads the config directory and starts the service on st, with
// its metrics on reg and its reloads logged on log.
func (f *flags) service(st store.Store, opts []rls.Option, reg *prometheus.Registry, log *slog.Logger) (*rls.Service, error) {
	storeName, failureMode := f.storeName()
	if storeName != "memory" && f.redisFailure == "local" && !f.set["nodes"] {
		log.Warn("-redis-failure local without -nodes: while Redis is away each process decides at the full limit; set -nodes to the number of floodgate-rls processes")
	}
	m, err := rls.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, rls.WithLogger(log), rls.WithMetrics(m), rls.WithOnReload(func(r rls.Reload) {
		if r.Err != nil {
			log.Error("config refused; the running one stays", "source", r.Source, "err", r.Err)
			return
		}
		log.Info("config applied", "version", r.Version, "domains", r.Domains, "added", len(r.Policy.Added),
			"changed", r.Policy.Changed, "removed", len(r.Policy.Removed))
	}))
	cfg, err := rls.LoadDir(f.configDir)
	if err != nil {
		return nil, err
	}
	svc, err := rls.New(st, cfg, opts...)
	if err != nil {
		return nil, err
	}
	log.Info("config loaded", "dir", f.configDir, "domains", svc.Domains(), "store", storeName, "redis_failure", failureMode)
	return svc, nil
}

// server is the gRPC server with its health service, and the metrics
// endpoint.
type server struct {
	g        *grpc.Server
	health   *health.Server
	msrv     *http.Server
	serveErr chan error
	addrs    [2]string
}

// listen starts serving svc on -addr and the metrics on -metrics.
func listen(f *flags, svc *rls.Service, reg *prometheus.Registry, log *slog.Logger) (*server, error) {
	lis, err := net.Listen("tcp", f.addr)
	if err != nil {
		return nil, err
	}
	// Stop, after the shutdown timeout, still waits for the handlers
	// running (each is bounded by -redis-timeout), so that the leases are
	// given back only once no call is in flight.
	s := &server{g: grpc.NewServer(grpc.WaitForHandlers(true)), health: health.NewServer(), serveErr: make(chan error, 2)}
	svc.Register(s.g)
	healthpb.RegisterHealthServer(s.g, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_SERVING)
	go func() { s.serveErr <- s.g.Serve(lis) }()
	s.addrs[0] = lis.Addr().String()
	if f.metricsAddr != "" {
		ml, err := net.Listen("tcp", f.metricsAddr)
		if err != nil {
			s.g.Stop()
			return nil, err
		}
		s.addrs[1] = ml.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		s.msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := s.msrv.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.serveErr <- err
			}
		}()
	}
	log.Info("serving", "grpc", s.addrs[0], "metrics", s.addrs[1])
	return s, nil
}

// wait serves until ctx ends, reloading dir on SIGHUP; a server that
// fails is stopped and its error returned.
func (s *server) wait(ctx context.Context, hup <-chan os.Signal, svc *rls.Service, dir string, log *slog.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			log.Info("SIGHUP: reloading the config directory", "dir", dir)
			_ = svc.ReloadDir(dir) // applied or refused: logged by the reload callback
		case err := <-s.serveErr:
			s.g.Stop()
			return err
		}
	}
}

// shutdown stops gracefully: tell the health checkers first and keep
// serving for the drain, so that Envoy moves away; then let the calls in
// flight finish, within the timeout.
func (s *server) shutdown(f *flags, log *slog.Logger) error {
	log.Info("shutting down: health NOT_SERVING", "drain", f.drain.String())
	s.health.Shutdown()
	if f.drain > 0 {
		t := time.NewTimer(f.drain)
		select {
		case <-t.C:
		case err := <-s.serveErr:
			t.Stop()
			s.g.Stop()
			return err
		}
	}
	done := make(chan struct{})
	go func() { s.g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(f.shutdownAfter):
		s.g.Stop()
	}
	return nil
}

// stopMetrics shuts the metrics endpoint down, within timeout.
func (s *server) stopMetrics(timeout time.Duration) {
	if s.msrv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = s.msrv.Shutdown(ctx)
}

// checkFlags refuses, at startup, every flag value that could only fail
// later (when Redis goes away, at shutdown) and every flag that would be
// silently ignored; set holds the flags given on the command line.
func checkFlags(set map[string]bool, redisAddr, redisCluster string, redisTimeout time.Duration, failure string, nodes int, shutdownAfter time.Duration) error {
	switch failure {
	case "error", "open", "closed", "local":
	default:
		return fmt.Errorf("-redis-failure: unknown %q (want error, open, closed, local)", failure)
	}
	if nodes < 1 {
		return fmt.Errorf("-nodes %d: want at least 1 (the number of floodgate-rls processes sharing the limits)", nodes)
	}
	if err := checkRedis(set, redisAddr, redisCluster); err != nil {
		return err
	}
	if set["nodes"] && failure != "local" {
		return fmt.Errorf("-nodes applies only with -redis-failure local (it divides the local fallback's rate), not with %s", failure)
	}
	if redisTimeout <= 0 {
		return fmt.Errorf("-redis-timeout %v: want more than 0", redisTimeout)
	}
	if shutdownAfter <= 0 {
		return fmt.Errorf("-shutdown-timeout %v: want more than 0", shutdownAfter)
	}
	return nil
}

// checkRedis checks the Redis addresses, and refuses the Redis flags
// without a Redis.
func checkRedis(set map[string]bool, redisAddr, redisCluster string) error {
	if redisAddr != "" && redisCluster != "" {
		return errors.New("-redis and -redis-cluster: choose one")
	}
	if redisCluster != "" {
		for _, a := range strings.Split(redisCluster, ",") {
			if strings.TrimSpace(a) == "" {
				return fmt.Errorf("-redis-cluster %q: an empty address", redisCluster)
			}
		}
	}
	if redisAddr == "" && redisCluster == "" {
		for _, f := range []string{"redis-failure", "nodes", "redis-prefix", "redis-timeout"} {
			if set[f] {
				return fmt.Errorf("-%s needs -redis or -redis-cluster: the embedded memory store never fails and keeps no keys in Redis", f)
			}
		}
	}
	return nil
}

func openStore(addr, cluster, prefix string, timeout time.Duration, failure string, nodes int, events floodgate.Observer, log *slog.Logger) (store.Store, func(), error) {
	if addr == "" && cluster == "" {
		s, err := memstore.New()
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}
	if addr != "" && cluster != "" {
		return nil, nil, errors.New("-redis and -redis-cluster: choose one")
	}
	addrs := []string{addr}
	if cluster != "" {
		addrs = strings.Split(cluster, ",")
	}
	// open and closed are the service's failure modes (middleware.FailOpen,
	// middleware.FailClosed: answers without a quota that would make a client
	// wait); the store returns the error.
	fp := redisstore.FailError()
	closeLocal := func() {}
	switch failure {
	case "error", "open", "closed":
	case "local":
		local, err := memstore.New()
		if err != nil {
			return nil, nil, err
		}
		closeLocal = func() { local.Close() }
		fp = redisstore.Fallback(local, nodes)
	default:
		return nil, nil, fmt.Errorf("-redis-failure: unknown %q (want error, open, closed, local)", failure)
	}
	// Dial makes the client in the background when Redis is down: the
	// failure policy answers until it is there. The first dial's error
	// tells the log that it is down at startup.
	var firstErr atomic.Pointer[error]
	opt := rueidis.ClientOption{InitAddress: addrs, DisableCache: true,
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", dst)
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
			return c, err
		}}
	s, err := redisstore.Dial(opt, redisstore.WithPrefix(prefix), redisstore.WithTimeout(timeout), redisstore.WithFailurePolicy(fp), redisstore.WithObserver(events))
	if err != nil {
		closeLocal()
		return nil, nil, err
	}
	if e := firstErr.Load(); e != nil {
		if cluster != "" {
			log.Warn("redis cluster unreachable at startup: answering by -redis-failure, connecting in the background", "redis_cluster", cluster, "redis_failure", failure, "err", *e)
		} else {
			log.Warn("redis unreachable at startup: answering by -redis-failure, connecting in the background", "redis", addr, "redis_failure", failure, "err", *e)
		}
	}
	return s, func() { s.Close(); closeLocal() }, nil
}
