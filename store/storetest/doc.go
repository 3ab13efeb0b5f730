// Package storetest is the conformance suite of floodgate's stores: every
// [store.Store] (the in-memory one, the Redis one, yours) must pass it, the
// way [testing/slogtest] checks slog handlers.
//
// # Running it on a store
//
// Call [Run] from a test of the store's package with a function that makes
// an empty store:
//
//	func TestConformance(t *testing.T) {
//		clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := memstore.New(memstore.WithClock(clk))
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		}, storetest.WithClock(clk))
//	}
//
// A store that reads an injectable clock passes it the suite's [Clock] and
// says so with [WithClock]: time then moves only when the suite advances it,
// and every duration is checked exactly. A store that owns its time (a Redis
// server's TIME) runs without WithClock: the suite then sleeps where time
// must pass (tens of milliseconds at most) and tolerates the real time its
// checks take. Run the suite with -race.
//
// # What it checks
//
// With the keyed token bucket of package bucket: a fresh key admits exactly
// its burst, then denies with the exact RetryAfter; Remaining and ResetAfter
// are exact; a retry at now+RetryAfter is admitted; refill never passes the
// burst; costs above one; refunds (never beyond full) and peeks (which
// consume nothing); namespaces (different policies on one key) and keys
// (empty, "{", "}", "a}b{", CR/LF, NUL, invalid UTF-8, 64 KiB binary) are
// isolated; 1,000 concurrent takes on a fresh key admit exactly the burst;
// costs outside 1..burst are refused with [floodgate.ErrInvalidCost]; a done
// context gives an error, never a decision, and never hangs; with a manual
// clock, jumps of -1s, -1h and +10y credit nothing and break nothing.
//
// # ApplyAll
//
// [store.Store.ApplyAll] is checked with twins: keys with one history, of
// which one goes through the calls under test and the other does not. A
// group with one denying op, and any group evaluated with commit false,
// must leave its keys deciding exactly as their twins do, now and on every
// later request; a leaky bucket of 30 requests a minute, stepped on odd
// milliseconds, tells a store that takes and then refunds (the refund gives
// the units back but not the rounding) from one that changes nothing. Each
// op's decision must be what it alone gets, a denied op's RetryAfter exact,
// and a group retried after its largest RetryAfter admitted; ops on one key
// step in order; a cost above the capacity denies (through
// [floodgate.TakeAll]: [floodgate.ErrCostExceedsCapacity]); fewer decisions
// than ops, or a cost below 1, is an error; 16 goroutines applying
// overlapping groups neither deadlock nor leave a key's state different
// from what the admitted groups took; and a store with a Close method
// ([io.Closer]) returns [floodgate.ErrClosed] from then on, also to calls
// racing Close.
//
// # Other algorithms
//
// [RunAlgorithm] runs the algorithm-independent part on any
// [algo.Algorithm]: a fresh key is full, exactly Limit units pass at one
// instant, a retry at RetryAfter passes, refunds, namespace isolation, 1,000
// concurrent takes, a done context, denied groups and evaluations that
// change nothing, and (with a manual clock) decision by decision equality
// with the algorithm's own Step over a random sequence of times, keys and
// costs, for single Applies and for random ApplyAll groups of the
// algorithm and a token bucket. Algorithm packages call it on their algorithms;
// store packages can add them to [Run] with [WithAlgorithms]:
//
//	storetest.Run(t, newStore, storetest.WithClock(clk),
//		storetest.WithAlgorithms(leakyAlg, windowAlg))
//
// # Lua twins
//
// A store that runs algorithms as server-side scripts (the Redis store)
// implements [TwinStepper]: it can run an algorithm's Lua twin on a given
// state, time and cost. [RunAlgorithm] then also runs [RunEquivalence],
// which requires the twin and the Go step to agree, decision by decision
// and state by state, on random sequences of (now, n) with refunds, peeks
// and time going back. Every algorithm package runs RunAlgorithm on a real
// Redis when one is set up, so every twin is checked against its step.
//
// The checks run one after the other, never in parallel, so that a shared
// [Clock] is safe. Every decision is also checked for the invariants of
// [floodgate.Decision]: 0 <= Remaining <= Limit, RetryAfter == 0 exactly when
// allowed, no negative duration, no Delay on a denial.
package storetest
