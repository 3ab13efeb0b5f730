// Package benchmarks compares floodgate's Envoy rate limit service (rls)
// with envoyproxy/ratelimit, the reference, built from its module on this
// machine. It is a module of its own, so that users of rls never download
// the reference. Run:
//
//	cd rls/benchmarks && go run ./cmd/compare -rounds 6 -duration 3s
//
// with FLOODGATE_REDIS_ADDR pointing at a Redis (scripts/redis.sh start).
// TestConformanceWithReference sends one sequence of requests (the
// reference's README examples, nested and wildcard descriptors, unlimited,
// shadow mode, replaces, hits_addend of the request and of descriptors, a
// request's own limit, requests_per_unit 0, share_threshold,
// value_to_metric) to the reference and to rls on
// one Redis, and requires identical answers.
package benchmarks
