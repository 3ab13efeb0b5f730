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
	fs := flag.NewFlagSet("floodgate-rls", flag.ContinueOnError)
	fs.SetOutput(logw)
	var (
		configDir     = fs.String("config", "", "the config directory: one envoyproxy/ratelimit YAML file per domain (required)")
		addr          = fs.String("addr", ":8081", "the gRPC address")
		metricsAddr   = fs.String("metrics", "", "the address of the Prometheus /metrics endpoint (empty: none)")
		redisAddr     = fs.String("redis", "", "a Redis node (host:port); default: the embedded memory store")
		redisCluster  = fs.String("redis-cluster", "", "Redis Cluster nodes, comma-separated")
		redisPrefix   = fs.String("redis-prefix", "floodgate-rls:", "the prefix of the keys written to Redis")
		redisTimeout  = fs.Duration("redis-timeout", 50*time.Millisecond, "the timeout of one Redis decision")
		redisFailure  = fs.String("redis-failure", "local", "when Redis is away: local (decide on a local memory store, every limit's rate and capacity divided by -nodes), error (the call fails, Envoy's failure_mode_deny decides: Envoy's default admits), open (OK, with no limit and no headers), or closed (OVER_LIMIT, with no reset time)")
		nodes         = fs.Int("nodes", 1, "with -redis-failure local: the number of floodgate-rls processes sharing the limits (leased limits count them by heartbeats)")
		headers       = fs.String("headers", "", "response headers for Envoy to add: ietf, legacy or ietf,legacy")
		headerNames   = fs.Bool("header-policy-names", true, "with -headers ietf: name RateLimit-Policy members by the rate_limit's name, else a short hash (never the config path); false: by position (default, limit-2, ...)")
		shadow        = fs.Bool("shadow", false, "global shadow mode: answer OK whatever the limits say")
		watch         = fs.Bool("watch", true, "reload the config directory when it changes")
		secretFile    = fs.String("key-secret-file", "", "a file holding the secret (at least 16 bytes) of the hash that stands for credentials (descriptors with credential: true); every process sharing a Redis needs the same; default: a random one per process")
		shutdownAfter = fs.Duration("shutdown-timeout", 10*time.Second, "how long in-flight calls may take at shutdown, and then the leased limits to give back what their leases hold")
		showVersion   = fs.Bool("version", false, "print the command's version and the floodgate library's, and exit")
		drain         = fs.Duration("shutdown-drain", 2*time.Second, "at shutdown, how long the gRPC health says NOT_SERVING while calls are still served, before the server stops taking new ones (for Envoy's health checks to move away)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println(versionLine())
		return nil
	}
	log := slog.New(slog.NewTextHandler(logw, nil))
	if *configDir == "" {
		return errors.New("-config is required")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := checkFlags(set, *redisAddr, *redisCluster, *redisTimeout, *redisFailure, *nodes, *shutdownAfter); err != nil {
		return err
	}
	if *drain < 0 {
		return fmt.Errorf("-shutdown-drain %v: want 0 or more", *drain)
	}
	var hs rls.HeaderSet
	for _, h := range strings.Split(*headers, ",") {
		switch strings.TrimSpace(h) {
		case "":
		case "ietf":
			hs |= rls.HeadersIETF
		case "legacy":
			hs |= rls.HeadersLegacy
		default:
			return fmt.Errorf("-headers: unknown group %q (want ietf, legacy)", h)
		}
	}
	opts := []rls.Option{rls.WithHeaders(hs), rls.WithGlobalShadowMode(*shadow), rls.WithHeaderPolicyNames(*headerNames)}
	if *secretFile != "" {
		b, err := os.ReadFile(*secretFile)
		if err != nil {
			return err
		}
		opts = append(opts, rls.WithKeySecret(bytes.TrimSpace(b)))
	}

	// The store's failure-policy events reach the service once it exists.
	var svcp atomic.Pointer[rls.Service]
	storeEvents := floodgate.ObserverFunc(func(e floodgate.Event) {
		if s := svcp.Load(); s != nil {
			s.ObserveStore(e)
		}
	})
	st, closeStore, err := openStore(*redisAddr, *redisCluster, *redisPrefix, *redisTimeout, *redisFailure, *nodes, storeEvents, log)
	if err != nil {
		return err
	}
	defer closeStore()
	storeName, failureMode := "memory", "none (the memory store cannot fail)"
	switch {
	case *redisAddr != "":
		storeName, failureMode = "redis "+*redisAddr, *redisFailure
	case *redisCluster != "":
		storeName, failureMode = "redis-cluster "+*redisCluster, *redisFailure
	}
	if storeName != "memory" && *redisFailure == "local" && !set["nodes"] {
		log.Warn("-redis-failure local without -nodes: while Redis is away each process decides at the full limit; set -nodes to the number of floodgate-rls processes")
	}
	switch *redisFailure {
	case "open":
		opts = append(opts, rls.WithFailureMode(rls.FailOpen))
	case "closed":
		opts = append(opts, rls.WithFailureMode(rls.FailClosed))
	}
	opts = append(opts, rls.WithLogger(log))
	reg := prometheus.NewRegistry()
	m, err := rls.NewMetrics(reg)
	if err != nil {
		return err
	}
	opts = append(opts, rls.WithMetrics(m), rls.WithOnReload(func(r rls.Reload) {
		if r.Err != nil {
			log.Error("config refused; the running one stays", "source", r.Source, "err", r.Err)
			return
		}
		log.Info("config applied", "version", r.Version, "domains", r.Domains, "added", len(r.Policy.Added),
			"changed", r.Policy.Changed, "removed", len(r.Policy.Removed))
	}))
	cfg, err := rls.LoadDir(*configDir)
	if err != nil {
		return err
	}
	svc, err := rls.New(st, cfg, opts...)
	if err != nil {
		return err
	}
	svcp.Store(svc)
	// closeLeases gives back what the leased limits hold, on every return
	// (bounded by -shutdown-timeout), before the store's client closes.
	closeLeases := sync.OnceFunc(func() {
		cctx, cancel := context.WithTimeout(context.Background(), *shutdownAfter)
		defer cancel()
		if err := svc.Close(cctx); err != nil {
			log.Warn("leases not all given back: the tokens they held return as their buckets refill", "err", err)
		}
	})
	defer closeLeases()
	log.Info("config loaded", "dir", *configDir, "domains", svc.Domains(), "store", storeName, "redis_failure", failureMode)
	if *watch {
		if err := svc.WatchDir(ctx, *configDir); err != nil {
			return err
		}
	}

	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// Stop, after the shutdown timeout, still waits for the handlers
	// running (each is bounded by -redis-timeout), so that the leases are
	// given back only once no call is in flight.
	g := grpc.NewServer(grpc.WaitForHandlers(true))
	svc.Register(g)
	hsrv := health.NewServer()
	healthpb.RegisterHealthServer(g, hsrv)
	hsrv.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hsrv.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_SERVING)
	serveErr := make(chan error, 2)
	go func() { serveErr <- g.Serve(lis) }()

	var msrv *http.Server
	var mAddr string
	if *metricsAddr != "" {
		ml, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			g.Stop()
			return err
		}
		mAddr = ml.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := msrv.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	log.Info("serving", "grpc", lis.Addr().String(), "metrics", mAddr)
	if ready != nil {
		ready <- [2]string{lis.Addr().String(), mAddr}
	}

wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case <-hup:
			log.Info("SIGHUP: reloading the config directory", "dir", *configDir)
			_ = svc.ReloadDir(*configDir) // applied or refused: logged by the reload callback
		case err := <-serveErr:
			g.Stop()
			return err
		}
	}
	// Graceful shutdown: tell the health checkers first and keep serving
	// for the drain, so that Envoy moves away; then let the calls in flight
	// finish, within the timeout.
	log.Info("shutting down: health NOT_SERVING", "drain", drain.String())
	hsrv.Shutdown()
	if *drain > 0 {
		t := time.NewTimer(*drain)
		select {
		case <-t.C:
		case err := <-serveErr:
			t.Stop()
			g.Stop()
			return err
		}
	}
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(*shutdownAfter):
		g.Stop()
	}
	// No call is in flight any more: the leased limits give the tokens
	// their leases hold back to Redis, for the other nodes to spend.
	closeLeases()
	if msrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), *shutdownAfter)
		defer cancel()
		_ = msrv.Shutdown(sctx)
	}
	log.Info("stopped")
	return nil
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
	// open and closed are the service's failure modes (rls.FailOpen,
	// rls.FailClosed: answers without a quota that would make a client
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
