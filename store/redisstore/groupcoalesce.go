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
	q      inflight[*groupCall]

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
	b := &groupCoalescer{s: s, script: scriptFor(kindGroups, g.twins)}
	b.q = inflight[*groupCall]{max: s.coalesce, limit: maxGroupBatch, run: b.runBatch}
	c, _ := s.groupCos.LoadOrStore(g.script, b)
	return c.(*groupCoalescer)
}

// do decides g in mode, writing its ops' decisions to out: directly when
// fewer than the bound of script calls are in flight, else through the
// queue.
func (b *groupCoalescer) do(ctx context.Context, g *group, mode string, out []floodgate.Decision) (bool, error) {
	c, direct := b.q.enter(func() *groupCall {
		c := groupCallPool.Get().(*groupCall)
		c.g, c.mode, c.all, c.err = g, mode, false, nil
		if cap(c.out) < len(out) {
			c.out = make([]floodgate.Decision, len(out))
		}
		c.out = c.out[:len(out)]
		c.state.Store(callWaiting)
		return c
	})
	if direct {
		all, err := b.s.exec(ctx, g, mode, out)
		b.q.release()
		return all, err
	}

	cctx, cancel := b.s.callContext(ctx)
	if cancel != nil {
		defer cancel()
	}
	select {
	case <-c.done:
		return c.finish(out)
	case <-cctx.Done():
	}
	if b.q.leave(c) {
		c.g = nil
		groupCallPool.Put(c)
		return false, cctx.Err()
	}
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
