// Package simulate is a deterministic discrete-event simulation of a server
// behind a concurrency limiter, in simulated time. It drives an
// [adaptive.Gate] (or anything that hands out [adaptive.Token]s, such as a
// priority.Shedder) with Poisson traffic from several classes, serves the
// admitted requests on a server with a fixed number of workers and a bounded
// queue, and reports per-window figures: offered load, admissions, sheds,
// successes, drops, p99 latency, limit and in-flight.
//
// # The server model
//
// The server has Workers workers; a request takes Service +-Jitter (uniform)
// of a worker's time. Requests that find every worker busy wait in a FIFO
// queue of at most Queue requests, so latency grows with queueing past
// Workers (the server's capacity C). A request that finds the queue full is
// refused at once: its token ends with Dropped. A served request's token ends
// with Success when it completes. Latency is measured from arrival to
// completion; requests shed by the gate are not timed.
//
// # Time and determinism
//
// The simulation owns its clock (see [Sim.Clock]); give it to the gate
// with adaptive.WithClock. Nothing sleeps and every random draw comes from
// the seeded source, so a run is a pure function of its Config. A Sim runs on
// one goroutine and is not safe for concurrent use.
package simulate
