package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
)

// Coalescing of groups. ApplyAll calls that run one group script (every
// call on a single node or Sentinel client: one slot) are coalesced like
// single decisions (coalesce.go): while fewer than the store's coalescing
// bound of calls of one group script are in flight, a call runs its own
// script; beyond, calls wait in a queue, and one call of scriptGroupsBody
// takes the whole queue (one TIME, then each group in turn, as its own
// script would run it, each atomic and seeing the groups before it). The
// groups of one script share its twins, whatever their policies' parameters.

// groupCoalescer queues the group calls of one group script.
type groupCoalescer struct {
	s      *Store
	script *script // scriptGroupsBody on the same twins

	mu     sync.Mutex
	queue  []*groupCall
	flying int

	batches, batched atomic.Int64 // batch scripts run, groups they carried (tests)
}

// groupCall is one queued group. The decisions land in out, which the call
// owns (the caller copies them after done: a caller that gave up must not
// have its own slice written later).
type groupCall struct {
	g     *group
	mode  string
	all   bool
	out   []floodgate.Decision
	err   error
	done  chan struct{}
	state atomic.Int32
}

// groupCoalescerFor returns the coalescer of g's script.
func (s *Store) groupCoalescerFor(g *group) *groupCoalescer {
	if c, ok := s.groupCos.Load(g.script); ok {
		return c.(*groupCoalescer)
	}
	c, _ := s.groupCos.LoadOrStore(g.script, &groupCoalescer{s: s, script: scriptFor(kindGroups, g.twins)})
	return c.(*groupCoalescer)
}

// do decides g in mode, writing its ops' decisions to out: directly when
// fewer than the bound of script calls are in flight, else through the
// queue.
func (b *groupCoalescer) do(ctx context.Context, g *group, mode string, out []floodgate.Decision) (bool, error) {
	b.mu.Lock()
	if b.flying < b.s.coalesce {
		b.flying++
		b.mu.Unlock()
		all, err := b.s.exec(ctx, g, mode, out)
		b.release()
		return all, err
	}
	c := groupCallPool.Get().(*groupCall)
	c.g, c.mode, c.all, c.err = g, mode, false, nil
	if cap(c.out) < len(out) {
		c.out = make([]floodgate.Decision, len(out))
	}
	c.out = c.out[:len(out)]
	c.state.Store(callWaiting)
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	cctx, cancel := b.s.callContext(ctx)
	if cancel != nil {
		defer cancel()
	}
	select {
	case <-c.done:
		return c.finish(out)
	case <-cctx.Done():
	}
	b.mu.Lock()
	for i, q := range b.queue {
		if q == c {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			b.mu.Unlock()
			c.g = nil
			groupCallPool.Put(c)
			return false, cctx.Err()
		}
	}
	b.mu.Unlock()
	// A batch took it: abandon it unless its result is already here (an
	// abandoned call is left to the garbage collector).
	if c.state.CompareAndSwap(callWaiting, callAbandoned) {
		return false, cctx.Err()
	}
	<-c.done
	return c.finish(out)
}

var groupCallPool = sync.Pool{New: func() any { return &groupCall{done: make(chan struct{}, 1)} }}

// finish copies c's decisions to the caller's out and recycles c.
func (c *groupCall) finish(out []floodgate.Decision) (bool, error) {
	all, err := c.all, c.err
	if err == nil {
		for j := range c.g.n {
			out[c.g.op(j)] = c.out[c.g.op(j)]
		}
	}
	c.g, c.err = nil, nil
	groupCallPool.Put(c)
	return all, err
}

// release ends a script call; a worker takes over the queue if needed.
func (b *groupCoalescer) release() {
	b.mu.Lock()
	if len(b.queue) > 0 {
		b.mu.Unlock()
		go b.drain()
		return
	}
	b.flying--
	b.mu.Unlock()
}

// drain runs batches until the queue is empty. It owns one of the in-flight
// slots.
func (b *groupCoalescer) drain() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.flying--
			b.mu.Unlock()
			return
		}
		batch := b.queue
		if len(batch) > maxGroupBatch {
			batch = batch[:maxGroupBatch]
			b.queue = append([]*groupCall(nil), b.queue[maxGroupBatch:]...)
		} else {
			b.queue = nil
		}
		b.mu.Unlock()
		b.runBatch(batch)
	}
}

// maxGroupBatch bounds the groups of one batch script.
const maxGroupBatch = 64

// runBatch runs one scriptGroupsBody call for batch and delivers every
// group's result.
func (b *groupCoalescer) runBatch(batch []*groupCall) {
	nk, na := 0, 2
	for _, c := range batch {
		nk += len(c.g.keys)
		na += 2 + len(c.g.args) - 1
	}
	keys := make([]string, 0, nk)
	args := make([]string, 0, na)
	args = append(args, b.s.injectedNow(), strconv.Itoa(len(batch)))
	for _, c := range batch {
		keys = append(keys, c.g.keys...)
		args = append(args, strconv.Itoa(len(c.g.keys)), strconv.Itoa(len(c.g.args)-1), c.mode)
		args = append(args, c.g.args[2:]...) // the group's arguments after the time and the mode
	}
	b.batches.Add(1)
	b.batched.Add(int64(len(batch)))
	arr, err := b.s.call(b.s.dl.get(), b.script, keys, args).ToArray()
	if err == nil && len(arr) != len(batch) {
		err = errReply
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			var res []rueidis.RedisMessage
			if res, c.err = arr[i].ToArray(); c.err == nil {
				c.all, c.err = decodeGroup(res, c.g, c.out)
			}
		}
		if c.state.CompareAndSwap(callWaiting, callDelivered) {
			c.done <- struct{}{}
		}
	}
}
