// Package priority sheds load by class: several traffic classes share one
// capacity, and when it runs short the least important class is shed first.
//
// The capacity is a number of requests in flight: the current limit of the
// [adaptive.Gate] given to [NewShedder]: a fixed one (the gate of
// [adaptive.NewConstant]) or an adaptive one, so that it follows the
// server's latency. Each class has a threshold, ShedAt, a fraction of the
// capacity: a request of the class is admitted only while the requests in
// flight (all classes together) are fewer than ShedAt x capacity. The
// defaults are critical at 100%, standard at 95% and
// best-effort at 85%: best-effort is shed first, standard next, and critical
// only when the capacity is exhausted; the last 15% of the capacity is kept
// for the more important classes. Class names and thresholds are
// configurable, and there may be any number of classes, listed from the
// least important up, with thresholds that do not decrease.
//
// A [Class] is an index into that list, so the zero Class is the least
// important one: a request whose class is missing or unknown
// ([Shedder.Class] of a name not in the list gives Class 0) is shed first,
// never treated as critical.
//
// Admitted requests get an [adaptive.Token], to end with Success, Dropped or
// Ignore exactly as with an [adaptive.Gate]: that is what feeds the
// adaptive capacity.
//
// # Waiting
//
// By default Acquire never blocks: a shed request gets an error wrapping
// [adaptive.ErrLimitExceeded] at once. When the capacity gate is built
// with [adaptive.WithQueue], a shed request waits in its bounded queue
// instead, until its class fits again or its context ends; when a slot
// frees, a waiter of a more important class is served before a less
// important one, and a request that finds the queue full takes the place of
// a waiter of a less important class (which is then rejected).
//
// # Choosing between shedding at once and waiting
//
// Thresholds alone keep only the top slice of the capacity (the top 5% with
// the defaults) for the more important classes. Under heavy overload the
// less important classes keep the rest full, and every slot freed by a
// completion goes to whichever admissible request arrives first, so a burst
// of critical requests larger than that slice is shed. In the simulation of
// the tests (3x overload; critical 20% of the load, standard 30%,
// best-effort 50%) critical success is about 90% without a queue and 100%
// with one, on a fixed capacity. When critical traffic must not be shed,
// give the capacity a queue: a short wait absorbs the burst without keeping
// capacity idle. The queue is also ordered by class, so standard is served
// before best-effort.
//
// # Observer, zero values, concurrency
//
// Every admission and rejection goes to the capacity gate's
// [floodgate.Observer] with the class name as Event.Class; [Shedder.Stats]
// counts them per class. A nil or empty class list means the defaults. A
// [Shedder] is safe for concurrent use.
package priority
