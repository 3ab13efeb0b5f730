package algo

// MaxReserveArg bounds the arguments of [Reservable] (maxWait and resetIn,
// in µs): larger values are taken as MaxReserveArg, smaller resetIn as
// -MaxReserveArg, so that every sum a reserving step computes stays exact
// in Lua. It is 2^51 µs, some 71 years.
const MaxReserveArg = int64(1) << 51

// Reservable is an optional interface of an [Algorithm] that can reserve:
// admit a request now for a time in the future. Each reservation pushes the
// key's state further, so that the next one is scheduled after it: waiters
// that reserve are served in the order of their reservations (first in,
// first out), each after its own Decision.Delay, and none polls.
//
// Reserve and Cancel return twins of the algorithm: Algorithms that step the
// same state (their Spec has the same Namespace, Words, MaxLog and
// Capacity; another Name and Lua twin, whose Params carry the argument) and
// that a store runs like any other. They are immutable, cheap to make, and
// meant for one call each.
type Reservable interface {
	Algorithm

	// Reserve returns the step that reserves within maxWait µs (0 ..
	// MaxReserveArg). Its step with n > 0 admits the request when it can be
	// served within maxWait of now and within the algorithm's reservation
	// horizon (a bound of its own, documented by each algorithm): Allowed,
	// with Delay the wait (zero when it can be served at once), and the
	// reservation kept in the state. Otherwise it denies and changes nothing,
	// and RetryAfter tells when to try again:
	//
	//   - more than maxWait: the request cannot be served within maxWait;
	//     RetryAfter is the wait it would have had;
	//   - at most maxWait: it was refused only because it would queue beyond
	//     the horizon; RetryAfter is how long until it fits, when a Reserve
	//     with maxWait less that time would admit it (if nobody else came).
	//
	// With n == 0 it peeks and with n < 0 it refunds, as the Algorithm.
	Reserve(maxWait int64) Algorithm

	// Cancel returns the step that gives back a reservation that will not
	// be used. resetIn (µs) locates the reservation in the key's queue: its
	// Decision.ResetAfter less the time elapsed since (measured from before
	// the reserving call). Its step with n < 0 gives back the -n units of
	// that reservation when it is the last of the queue, and nothing when
	// later reservations are scheduled beyond it: they keep their times,
	// and giving back any of it would let a newcomer be served with them
	// and exceed the limit. The key's time to full beyond resetIn tells
	// which: under one unit's interval it is the caller's clock error, and
	// the units come back less it (never beyond full capacity). It is
	// always allowed. With n == 0 it peeks; with n > 0 it reserves within
	// no wait at all (Reserve(0)).
	Cancel(resetIn int64) Algorithm
}
