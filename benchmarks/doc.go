// Package benchmarks compares floodgate with the Go rate limiters people use
// today, side by side in one run: golang.org/x/time/rate, go.uber.org/ratelimit,
// sethvargo/go-limiter, throttled/throttled, ulule/limiter, go-chi/httprate,
// didip/tollbooth and go-redis/redis_rate.
//
// It is a module of its own so that users of floodgate never download the
// peers. Run every comparison and write BENCHMARKS.md with:
//
//	cd benchmarks && go run ./cmd/report
//
// Benchmark names follow Benchmark<Group>/<case>/<library>; the report
// computes, for each group and case, the ratio of floodgate's ns/op to each
// peer's, from medians over repeated runs. The Redis cases also report the
// Redis server's CPU per operation (redis-cpu-us/op, from INFO cpu), which
// the report compares in a column of its own; the server must serve nothing
// else while they run. Rows named floor-* are not libraries: each does only
// the work that the libraries it stands for cannot do without (its
// benchmark's comment says what, and for which rows), and the report writes
// floor / peer under its table.
package benchmarks
