// Package shadow measures the demand a rate limit sees and recommends the
// limit it should have: run a policy in dry run (or enforcing) for a full
// traffic cycle, read the distribution of per-key demand, set the limit at a
// high quantile plus headroom, then let a guarded tuner move it in bounded
// steps, rolling back when the protected service suffers.
//
// # Use
//
//	rec, err := shadow.New(shadow.Config{})          // p95 + 40%, after 1 h of observation
//	defer rec.Close()
//	recorded, err := rec.Store(mem)                  // any store.Store: memstore, redisstore
//	live, err := policy.NewLive(cfg, recorded)       // every policy recorded by name, dry run included
//	rec.Follow(live)                                 // reports show the running limits and dry-run states
//	http.Handle("/debug/floodgate/demand", rec.Handler()) // JSON and an HTML page with a chart
//	d, _ := rec.Demand("api")
//	fmt.Println(d.Report().Recommendation)
//
// The recording store sees every charged decision of every named limit on
// it: a [policy.Live]'s Take and Match checks (decided through
// floodgate.TakeAll and the store's ApplyAll), the shadow checks of dry-run
// policies, the keyed limiters of the algorithm packages. It records the
// units asked (cost n >= 1) and whether the policy's current limit refused
// them; refunds and peeks are not demand. A dry-run policy's checks are
// decided after the enforcing ones and only for admitted requests (see
// httplimit, grpclimit): the demand of requests an enforcing policy refused
// never reaches it. [Demand.Observe] records a decision directly, for
// limiters that are not on a store.
//
// # What is measured
//
// Time is cut into windows of the policy's own length (a rate's period, a
// window's length), aligned on the Unix epoch. A key's demand in a window is
// the units it asked for in it; its burst in the window the most it asked
// for within one eighth of it. The distributions are over key-windows: each
// key contributes one sample per window in which it asked for anything, so
// that the q-quantile is the limit under which a fraction q of the active
// key-windows fit. A report counts the windows that have ended.
//
// # Accuracy
//
// Quantiles come from a log-bucketed sketch (in the manner of DDSketch): every
// value is reported within a relative error of 1%.
// The per-key windows are measured exactly for a sample of the keys: a key is
// sampled in a window when a hash of it and of the window number falls below
// 2^-level, so that the sample changes with every window and, over many
// windows, covers every key; a sampled window weighs 2^level. The level
// starts at 0 (every key) and rises when the table of sampled keys
// overflows (more than 1/256 of the sampled decisions of a window found no
// slot; the sampled decisions are not counted apart but estimated as the
// window's decisions x 2^-level, exact at level 0); such a window's
// samples are dropped, as they favour the keys that came first. A
// key-window counts up to 2^31 units. A decision that races, on another
// goroutine, the start of its key's next window (or sub-window) may count
// in that one. The sampling adds an error in rank of about
// sqrt(q(1-q)/m) for m sampled key-windows. Measured on 10,000 keys with
// log-normal demand over 20 seeds, the recommended limit was within 3.4% of
// the true p95 x 1.4 after 5 windows with sigma 0.5, within 4% with sigma 1
// (TestRecommendationOnSyntheticWorkload runs three seeds). The level falls
// back when twice the keys would fill under 70% of the table.
//
// The heaviest keys are kept Space-Saving style: a key in the top-K is
// counted exactly there; another is counted in a count-min sketch of the
// current window (2 x 1,024 counters, conservative update, cleared at each
// window) and replaces the lightest entry when its estimate beats that
// entry's heaviest window, counted by its upper bound (an entry keeps its
// place by the most its heaviest window may have been, so that a key whose
// demand sat in one window is not pushed out by newcomers'
// over-estimates). Its counts may over-state by the estimate it entered
// with (Key.Overcount); Key.Peak counts by the lower bound. So a key whose
// estimate in a window exceeds the K-th heaviest key's peak by more than
// the largest Overcount of the list enters it, and stays. While the top-K
// has a free entry every decision reaches the count-min; once it is full,
// a decision of n units of a key outside it does with probability n/8
// (drawn from a hash of the key and of a counter of decisions), counting 8
// units, and always when n >= 8, counting n; the others write nothing
// there. A key's estimate then gains a standard error of about
// sqrt(7 x units) (8% of an abuser's 1,000 a window, a key of 20 a window
// is drowned in its counters' collisions either way), and a heavy key
// enters about 8 units later than it would: its counts from then on
// are exact, Key.Refused counts the refusals since. A key is certain to be
// found when its share of a window's units is above about 1/1,000; a key
// far heavier than the others (an abuser at 50 times the median) is found
// within its first few dozen decisions. The number of distinct keys is a
// HyperLogLog of 1,024 registers (3.3% standard error).
//
// # Memory
//
// Each policy's recording is allocated when the policy is first seen and
// never grows: the table of sampled keys (Config.Slots, default 4,096 slots
// of 28.5 bytes with their buckets' locks and counters: 114 KiB), three
// sketches of 1,110 counters (26 KiB: offered demand, bursts, admitted
// demand), the count-min rows (8 KiB), the HyperLogLog (1 KiB) and the
// top-K (3 KiB): 153 KiB by construction, 161 KiB as
// allocated (the allocator rounds large blocks up to pages), under
// 192 KiB, whatever the number of keys
// (TestMemoryBounded measures it from 1,000 to 1,000,000 keys).
// Config.MaxPolicies bounds the number of policies.
//
// # Keys
//
// The recording sees the keys the store sees. The table keeps only a 64-bit
// hash of each key (hash/maphash, with a per-Recorder random seed). The
// top-K keeps up to 48 bytes of each of its keys for the report, unless
// Config.HideKeys is set: floodgate's transports turn keys derived from
// credentials into keyed hashes before any store sees them (a header or
// metadata credential, a descriptor entry marked Credential), so a
// credential never appears there; a program that gives raw credentials as
// keys to a limiter (policy.Live.Take with API keys) sets HideKeys.
//
// # Recommendation
//
// limit = ceil(quantile x (1 + headroom)) per window, by default the 95th
// percentile plus 40%; burst = ceil(burst quantile x (1 + headroom)), by
// default of the 99th percentile of the per-window largest bursts. A
// [Recommendation] carries its evidence: how long and how many windows,
// keys and key-windows were observed, how many key-windows (and units)
// enforcing it would have refused, and which of the heaviest keys sit above
// it. There is none before Config.MinObservation.
//
// A report shows the offered demand (every unit asked, Report.Units and
// Report.Demand) beside the admitted demand (the units the limit did not
// refuse, Report.RefusedUnits and Report.Admitted). Under an enforcing
// limit a refused request that is retried is asked again: a client that
// retries at once inflates the offered demand many times (one key asking
// 50 a second, enforced at 50 with a burst of 10 and retrying every
// refusal a millisecond later, offers about 850 units a second). So when
// more than half of the units asked were refused and the policy enforces,
// the recommendation is taken from the admitted demand
// (Recommendation.From), a lower bound of the demand, at most what the
// current limit lets through in a window. A dry-run policy refuses nobody
// and keeps the offered demand; whether a policy runs in dry run is read
// from the Live given to [Recorder.Follow] (a [Tuner] follows its own),
// and a policy not followed is taken as enforcing. A note says so in both
// cases. A policy with fewer keys (estimated) than 1/(1-Quantile), 20 for
// p95, is flagged (Recommendation.FewKeys, and a note): its quantile is
// over its keys' own windows, one key's for a per-service budget, not a
// distribution across keys.
//
// # Tuning
//
// A [Tuner] (opt in, per policy) applies recommendations through
// policy.Live.Update: at most one step per interval, each at most 30% of the
// current limit, within a floor and a ceiling, never before the
// recommendation exists. A health func supplied by the user is asked at
// every step; unhealthy after a step, the step is rolled back (within one
// interval), the tuner holds for a cool-down (TuneConfig.CoolDown, 10
// intervals by default, doubled after each further rollback before a step
// has gone past the limit rolled back, up to 16 times), then bisects
// toward the limit rolled back and, healthy there, moves on toward the
// recommendation. Every proposed,
// applied and rolled-back change is a [TuneEvent] with the limits before and
// after and the evidence; in dry run the tuner only proposes.
//
// # Cost, time, concurrency
//
// Recording a decision allocates nothing and takes no lock shared by all
// keys. Its common path is a hash of the key, loads (the window, the
// distinct-key register, the top-K's keys and threshold) and one atomic
// add on a counter spread by key; a sampled key adds one more, to its
// slot, and takes a spin lock on one bucket of the table only to begin a
// window or a sub-window. A decision adds one more when it asks for more
// than one unit, when it is refused (two, and one more for a sampled
// key), when its key is in the top-K; the
// distinct-key register is written only when it grows; one decision in 8
// of the keys outside a full top-K updates the count-min.
// BenchmarkObserve and BenchmarkDecision measure it: see the README,
// "Measure, then enforce", for the figures. By
// default decisions are timed by floodgate's clock read every millisecond
// (Config.Resolution) by a goroutine that Close stops: reading a clock on
// every decision would cost more than the recording. Config.Clock replaces
// it (read on every decision), for tests. A Recorder, its Demands and its
// Tuners are safe for concurrent use; a report taken while decisions are
// recorded may miss the latest of them.
//
// Prometheus gauges of the reports are in package shadowprom.
package shadow
