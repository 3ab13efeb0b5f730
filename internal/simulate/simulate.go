package simulate

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
)

// Server is the simulated server.
type Server struct {
	// Workers is the number of requests served at once: the capacity C.
	Workers int
	// Queue is how many requests may wait for a worker; more are refused.
	Queue int
	// Service is the mean service time of one request.
	Service time.Duration
	// Jitter in [0, 1) spreads service times uniformly over
	// Service*(1 +- Jitter).
	Jitter float64
}

// Capacity returns the server's throughput in requests per second when every
// worker is busy.
func (s Server) Capacity() float64 { return float64(s.Workers) / s.Service.Seconds() }

// Config describes one run.
type Config struct {
	// Server is the simulated server.
	Server Server
	// Classes is the number of traffic classes (>= 1).
	Classes int
	// Rate returns the offered load of class c during window w, in requests
	// per second; a rate that is not positive and finite means no traffic.
	Rate func(w, c int) float64
	// Windows is the number of reporting windows to run.
	Windows int
	// Window is the length of a reporting window. Default 1s.
	Window time.Duration
	// Seed seeds the random source.
	Seed uint64
	// MaxWait is how long a request may wait in the gate's queue when the
	// Target has AcquireFunc; it is then withdrawn and counted as shed.
	MaxWait time.Duration
}

// Target is what the simulation drives.
type Target struct {
	// Acquire asks for a slot for a request of class c.
	Acquire func(c int) (*adaptive.Token, error)
	// AcquireFunc, when set, is used instead of Acquire: the asynchronous
	// form (see [adaptive.Gate.AcquireFunc]) that lets a request wait in
	// the gate's queue, for at most Config.MaxWait.
	AcquireFunc func(c int, done func(*adaptive.Token, error)) (cancel func() bool)
	// Limit and InFlight are read at the end of every window.
	Limit    func() int
	InFlight func() int
}

// ForGate returns the Target for a plain [adaptive.Gate] (classes are ignored).
func ForGate(l *adaptive.Gate) Target {
	return Target{
		Acquire:  func(int) (*adaptive.Token, error) { return l.Acquire(bg) },
		Limit:    func() int { return l.Stats().Limit },
		InFlight: func() int { return l.Stats().InFlight },
	}
}

// Window holds the figures of one reporting window; the per-class slices are
// indexed by class.
type Window struct {
	// Index is the window's number, from 0.
	Index int
	// Offered counts arrivals; Admitted and Shed split them by the gate's
	// verdict (given later for a request that waited in the gate's queue,
	// but counted in the window of its arrival).
	Offered, Admitted, Shed []int
	// Succeeded and Dropped count requests that completed or were refused by
	// the server during the window (they may have arrived earlier).
	Succeeded, Dropped []int
	// P99 is the 99th percentile latency of the window's successes per class
	// (0 when none); P99All is over every class.
	P99    []time.Duration
	P99All time.Duration
	// Limit and InFlight are the gate's figures at the end of the window.
	Limit, InFlight int
}

// Total sums a per-class slice.
func Total(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// Sim is one simulation.
type Sim struct {
	cfg   Config
	now   atomic.Int64 // simulated Unix ns
	rng   *rand.Rand
	epoch int64
}

// New returns a simulation for cfg; the clock starts at a fixed date.
func New(cfg Config) *Sim {
	if cfg.Window <= 0 {
		cfg.Window = time.Second
	}
	s := &Sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	s.epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	s.now.Store(s.epoch)
	return s
}

// Clock returns the simulated clock.
func (s *Sim) Clock() floodgate.Clock {
	return floodgate.ClockFunc(func() time.Time { return time.Unix(0, s.now.Load()) })
}

// job is one admitted request at the server.
type job struct {
	tok     *adaptive.Token
	class   int
	arrival int64
	done    int64
}

type jobHeap []*job

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, j int) bool { return h[i].done < h[j].done }
func (h jobHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *jobHeap) Push(x any)        { *h = append(*h, x.(*job)) }
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	*h = old[:len(old)-1]
	return j
}

// Run drives t for cfg.Windows windows and returns their figures.
func (s *Sim) Run(t Target) []Window {
	r := &runner{s: s, t: t, nc: max(s.cfg.Classes, 1)}
	return r.run()
}

// runner is the state of one Run.
type runner struct {
	s       *Sim
	t       Target
	nc      int
	busy    int
	queue   []*job  // the server's queue
	running jobHeap // jobs in service, by completion time
	waits   []wait  // requests waiting in the gate's queue, by deadline
	cur     *Window
	lat     [][]time.Duration
}

// wait is a request waiting in the gate's queue.
type wait struct {
	deadline int64
	from     *Window
	class    int
	cancel   func() bool
}

func (r *runner) service() int64 {
	cfg := r.s.cfg
	f := 1 + cfg.Server.Jitter*(2*r.s.rng.Float64()-1)
	return int64(float64(cfg.Server.Service) * f)
}

// accept puts an admitted request, offered in window from, on the server, at
// the current time.
func (r *runner) accept(from *Window, c int, arrival int64, tok *adaptive.Token) {
	from.Admitted[c]++
	j := &job{tok: tok, class: c, arrival: arrival}
	now := r.s.now.Load()
	switch {
	case r.busy < r.s.cfg.Server.Workers:
		r.busy++
		j.done = now + r.service()
		heap.Push(&r.running, j)
	case len(r.queue) < r.s.cfg.Server.Queue:
		r.queue = append(r.queue, j)
	default:
		r.cur.Dropped[c]++
		tok.Dropped() // may hand the slot to a waiting request
	}
}

// complete ends the next job in service. The server's state is settled
// before the token is released, because the release may start another
// request (a waiter of the gate's queue) re-entrantly.
func (r *runner) complete() {
	j := heap.Pop(&r.running).(*job)
	r.s.now.Store(j.done)
	r.busy--
	if len(r.queue) > 0 {
		q := r.queue[0]
		r.queue = r.queue[1:]
		q.done = j.done + r.service()
		heap.Push(&r.running, q)
		r.busy++
	}
	r.cur.Succeeded[j.class]++
	r.lat[j.class] = append(r.lat[j.class], time.Duration(j.done-j.arrival))
	j.tok.Success()
}

// arrive offers one request of class c at the current time.
func (r *runner) arrive(c int) {
	at, from := r.s.now.Load(), r.cur
	from.Offered[c]++
	if r.t.AcquireFunc == nil {
		tok, err := r.t.Acquire(c)
		if err != nil {
			from.Shed[c]++
			return
		}
		r.accept(from, c, at, tok)
		return
	}
	cancel := r.t.AcquireFunc(c, func(tok *adaptive.Token, err error) {
		if err != nil {
			from.Shed[c]++
			return
		}
		r.accept(from, c, at, tok)
	})
	r.waits = append(r.waits, wait{deadline: at + int64(r.s.cfg.MaxWait), from: from, class: c, cancel: cancel})
}

func (r *runner) run() []Window {
	s, cfg, nc := r.s, r.s.cfg, r.nc
	win := int64(cfg.Window)
	out := make([]*Window, 0, cfg.Windows)
	next := make([]int64, nc)
	for w := 0; w < cfg.Windows; w++ {
		start := s.epoch + int64(w)*win
		end := start + win
		r.cur = &Window{Index: w}
		for _, p := range []*[]int{&r.cur.Offered, &r.cur.Admitted, &r.cur.Shed, &r.cur.Succeeded, &r.cur.Dropped} {
			*p = make([]int, nc)
		}
		r.lat = make([][]time.Duration, nc)
		// Poisson arrivals are memoryless: draw each class's next arrival
		// afresh from the window's start with the window's rate.
		for c := range nc {
			next[c] = s.arrival(start, cfg.Rate(w, c))
		}
		for {
			// The next event: the earliest arrival, completion or wait
			// deadline within the window.
			c, at := -1, end
			for k := range nc {
				if next[k] < at {
					c, at = k, next[k]
				}
			}
			if len(r.waits) > 0 && r.waits[0].deadline <= at {
				wt := r.waits[0]
				r.waits = r.waits[1:]
				s.now.Store(wt.deadline)
				if wt.cancel() {
					wt.from.Shed[wt.class]++
				}
				continue
			}
			if len(r.running) > 0 && r.running[0].done <= at {
				r.complete()
				continue
			}
			if c < 0 {
				break
			}
			s.now.Store(at)
			next[c] = s.arrival(at, cfg.Rate(w, c))
			r.arrive(c)
		}
		s.now.Store(end)
		r.cur.P99 = make([]time.Duration, nc)
		var all []time.Duration
		for c := range nc {
			r.cur.P99[c] = P99(r.lat[c])
			all = append(all, r.lat[c]...)
		}
		r.cur.P99All = P99(all)
		r.cur.Limit, r.cur.InFlight = r.t.Limit(), r.t.InFlight()
		out = append(out, r.cur)
	}
	res := make([]Window, len(out))
	for i, w := range out {
		res[i] = *w
	}
	return res
}

// arrival draws the next arrival after from a Poisson process of rate per
// second; a rate that is not positive and finite means none.
func (s *Sim) arrival(from int64, rate float64) int64 {
	if !(rate > 0) || math.IsInf(rate, 1) {
		return math.MaxInt64
	}
	return from + int64(s.rng.ExpFloat64()/rate*1e9) + 1
}

// P99 returns the 99th percentile (nearest rank) of d, 0 when empty. It
// sorts d.
func P99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	k := int(math.Ceil(0.99*float64(len(d)))) - 1
	return d[max(k, 0)]
}
