package memstore

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults used by [New] when no option overrides them.
const (
	// defaultMaxKeys is the default bound on the number of keys kept
	// (about 150 MB of token buckets at the measured 34 bytes per key).
	defaultMaxKeys = 1 << 22
	// defaultShards is the default number of shards (each with its own lock).
	defaultShards = 256
	// defaultSweepInterval is how often, by default, the background sweeper
	// drops the keys whose state is back to full.
	defaultSweepInterval = time.Minute
	// maxShards bounds WithShards.
	maxShards = 1 << 16
)

// Option configures a [Store]; build one with a With function. Options are
// applied in order; a later option overrides an earlier one of the same
// kind. The zero Option is not a valid option: [New] refuses it.
type Option struct {
	apply func(*config) error
}

type config struct {
	shards    int
	shardsSet bool
	maxKeys   int
	sweep     time.Duration
	clock     floodgate.Clock
	coarse    time.Duration // 0: read the clock on every call
}

func defaultConfig() config {
	return config{shards: defaultShards, maxKeys: defaultMaxKeys, sweep: defaultSweepInterval}
}

// WithShards sets the number of shards, a power of two between 1 and 65536.
// More shards mean less lock contention; the default, 256, suits most uses.
func WithShards(n int) Option {
	return Option{func(c *config) error {
		if n < 1 || n > maxShards || n&(n-1) != 0 {
			return fmt.Errorf("%w: memstore: shards must be a power of two in 1..%d, got %d", floodgate.ErrInvalidConfig, maxShards, n)
		}
		c.shards, c.shardsSet = n, true
		return nil
	}}
}

// WithMaxKeys bounds the number of keys the store keeps (n >= 1; default
// 4,194,304 = 1<<22, about 150 MB of token buckets at the measured 34 bytes
// per key). The bound is split evenly between the shards, so the total
// never exceeds n but one shard may evict while another still has room.
// See [Store] for what is evicted.
func WithMaxKeys(n int) Option {
	return Option{func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: memstore: max keys must be >= 1, got %d", floodgate.ErrInvalidConfig, n)
		}
		c.maxKeys = n
		return nil
	}}
}

// WithSweepInterval sets how often a background goroutine drops the keys
// whose state is back to full (default one minute). d == 0 disables the
// background sweeper (call
// [Store.Sweep] yourself, or rely on the MaxKeys eviction); d < 0 is an error.
func WithSweepInterval(d time.Duration) Option {
	return Option{func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: memstore: sweep interval must be >= 0, got %v", floodgate.ErrInvalidConfig, d)
		}
		c.sweep = d
		return nil
	}}
}

// WithClock makes the store read time from clock instead of
// the monotonic system clock (for tests). The clock is read once per Apply
// (twice when the token bucket's lock-free path decides again under the
// lock; see the package documentation, Time and Speed), and converted to
// Unix microseconds.
func WithClock(clock floodgate.Clock) Option {
	return Option{func(c *config) error {
		if clock == nil {
			return fmt.Errorf("%w: memstore: nil clock", floodgate.ErrInvalidConfig)
		}
		c.clock, c.coarse = clock, 0
		return nil
	}}
}

// Bounds of WithCoarseClock's resolution.
const (
	minCoarse = 100 * time.Microsecond
	maxCoarse = 100 * time.Millisecond
)

// WithCoarseClock makes the store read a cached time, refreshed every
// resolution (100µs..100ms; 1ms is the usual choice) by one background
// goroutine shared by every store of the process with that resolution,
// instead of reading the system clock on every call, for the algorithms
// slow enough for it: those whose grain ([algo.Grain], the time one unit
// of cost takes at their rate) is at least ten resolutions (at 1ms: at
// most 100 units per second per key). The others keep reading the exact
// clock: their rate needs it. A decision on the cached time costs an
// atomic load instead of a clock read: about half of a decision on one
// hot key on a KVM guest, where a clock read costs some 30-40 ns
// (BenchmarkKeyed/hot in the benchmarks module, thread CPU time: about 30
// against 65 ns a decision).
//
// The accuracy cost, for the algorithms that read it: every decision is
// made at a time up to resolution (a tenth of a unit's time) behind the
// real one, and more when the process is short of processors
// (the refreshing goroutine waits for one like any other: on a loaded
// 2-core machine it was seen over 50ms behind), and decisions made within
// one resolution see the same time. The store's time never goes
// backwards, so every guarantee of the algorithms holds in the store's
// time; measured in real time, a key refills up to the lag late, ResetAfter
// is up to the lag too long, and a real-time window may see up to rate x
// (the lag at its start) more admissions than burst + rate x window (the
// store's clock catches up inside the window). The lag changes from one
// call to the next, so the RetryAfter of every denial has one resolution
// added: a caller that waits it is admitted unless the lag grew by more
// than a resolution in between, at the price of waiting up to two
// resolutions too long.
//
// It replaces [WithClock] (the later of the two options wins); the sweeper
// reads the cached time. ApplyAll and the faster algorithms read the exact
// clock: a key stepped at an exact time and then at a cached, earlier one
// counts the earlier time as the later (the algorithms never let time go
// backwards).
func WithCoarseClock(resolution time.Duration) Option {
	return Option{func(c *config) error {
		if resolution < minCoarse || resolution > maxCoarse {
			return fmt.Errorf("%w: memstore: coarse clock resolution must be in %v..%v, got %v", floodgate.ErrInvalidConfig, minCoarse, maxCoarse, resolution)
		}
		c.clock, c.coarse = nil, resolution
		return nil
	}}
}

func (c *config) apply(opts []Option) error {
	for i, o := range opts {
		if o.apply == nil {
			return fmt.Errorf("%w: memstore: option %d is the zero Option", floodgate.ErrInvalidConfig, i)
		}
		if err := o.apply(c); err != nil {
			return err
		}
	}
	if c.maxKeys < c.shards {
		if c.shardsSet {
			return fmt.Errorf("%w: memstore: %d shards for at most %d keys: want shards <= max keys", floodgate.ErrInvalidConfig, c.shards, c.maxKeys)
		}
		// Fewer keys than default shards: one shard per key at most.
		for c.shards > c.maxKeys {
			c.shards /= 2
		}
	}
	return nil
}
