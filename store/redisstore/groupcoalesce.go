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
	keys, args := groupsArgs(b.s.injectedNow(), batch)
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

// groupsArgs returns the KEYS and ARGV of scriptGroupsBody for batch: the
// policies of every group once (groups of one script share twins, and
// calls of a service often share their policies), then each group with
// its ops' policies numbered in that list.
func groupsArgs(now string, batch []*groupCall) (keys, args []string) {
	nk, nops := 0, 0
	for _, c := range batch {
		nk += len(c.g.keys)
		nops += c.g.n
	}
	keys = make([]string, 0, nk)
	var pbuf [16]string
	var ibuf [16]int
	pols, idx := pbuf[:0], ibuf[:0] // pols: twin and description pairs; idx: each group's policies in pols
	for _, c := range batch {
		g := c.g
		for a := 3; a < g.opsAt; a += 2 {
			k := 0
			for k < len(pols) && (pols[k] != g.args[a] || pols[k+1] != g.args[a+1]) {
				k += 2
			}
			if k == len(pols) {
				pols = append(pols, g.args[a], g.args[a+1])
			}
			idx = append(idx, k/2+1)
		}
	}
	args = make([]string, 0, 3+len(pols)+3*len(batch)+3*nops)
	args = append(args, now, strconv.Itoa(len(pols)/2))
	args = append(args, pols...)
	args = append(args, strconv.Itoa(len(batch)))
	for _, c := range batch {
		g := c.g
		keys = append(keys, g.keys...)
		args = append(args, strconv.Itoa(len(g.keys)), strconv.Itoa(1+3*g.n), c.mode)
		for j := range g.n {
			op := g.args[g.opsAt+3*j:]
			local, _ := strconv.Atoi(op[1])
			args = append(args, op[0], strconv.Itoa(idx[local-1]), op[2])
		}
		idx = idx[(g.opsAt-3)/2:]
	}
	return keys, args
}
