// Package benchmarks compares floodgate's Envoy rate limit service (rls)
// with envoyproxy/ratelimit, the reference, built from its module on this
// machine. It is a module of its own, so that users of rls never download
// the reference. Run:
//
//	cd rls/benchmarks && go run ./cmd/compare -rounds 6 -duration 3s
//
// with FLOODGATE_REDIS_ADDR pointing at a Redis (scripts/redis.sh start).
package benchmarks
