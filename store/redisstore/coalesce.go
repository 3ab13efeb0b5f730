package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Coalescing. Under concurrency the cost of a decision on the Redis server
// is mostly the cost of running a script at all (FCALL, TIME, the reply),
// not the step. When more than a few calls of one algorithm are in flight,
// the calls that arrive meanwhile wait in a queue, and one script call takes
// the whole queue: one TIME, one MGET, then each call's step in turn (a key
// that appears twice sees its own earlier call), then one SET per key, all
// atomically. Each decision is still made by exactly one script run, in one
// round trip once it leaves the queue, with the same semantics as alone (the
// calls of one batch on one key see each other in order).
//
// Only on single-node and Sentinel clients: on a Cluster the keys of one
// script must share a slot, which the keys of different users do not.

const scriptBatchBody = `
local test, now = clock(ARGV[1])
local q = policy('1', ARGV[2])
local words, maxlog, p, pstr = q[2], q[3], q[4], q[5]
local base = 2
local out = {}
local vals = redis.call('MGET', unpack(KEYS))
local states = {} -- the latest state of each key of the batch
local raw = {} -- the value each key held
local ow = {} -- the first word it held
for i = 1, #KEYS do
  local key = KEYS[i]
  local s = states[key]
  if not s then
    raw[key] = vals[i]
    local _
    s, _, ow[key] = load(vals[i], q, now)
  end
  local s2, d = step(s, now, smallint[ARGV[base + i]] or tonumber(ARGV[base + i]), p)
  states[key] = s2
  local o = (i - 1) * 6
  for j = 1, 6 do out[o + j] = d[j] end
end
for key, s in pairs(states) do
  save(key, s, words, maxlog, now, test, pstr, raw[key], ow[key])
end
return out
`

// batchScripts caches the batch script per (Name, Source).
var batchScripts sync.Map // string -> *script

func batchScriptFor(sp algo.Spec) *script {
	key := sp.Name + "\x00" + sp.Lua.Source
	if l, ok := batchScripts.Load(key); ok {
		return l.(*script)
	}
	prelude := fmt.Sprintf("-- floodgate redisstore batch script: %s\nlocal step, convert = (function()\n%s\nend)()\nlocal steps, converts = {step}, {convert}\n%s", sp.Name, sp.Lua.Source, luaCommon)
	l, _ := batchScripts.LoadOrStore(key, newScript(prelude, scriptBatchBody))
	return l.(*script)
}

// maxBatch bounds the calls of one batch script.
const maxBatch = 256

// coalescer queues the calls of one policy beyond max in flight.
type coalescer struct {
	s      *Store
	p      *policy
	script *script
	max    int

	mu     sync.Mutex
	queue  []*call
	spare  []*call
	flying int // script calls in flight (direct or batch)

	batches, batched atomic.Int64 // batch scripts run, calls they carried (tests)
}

// call is one queued decision.
type call struct {
	key   string
	n     int64
	d     floodgate.Decision
	err   error
	done  chan struct{} // receives once, when state goes to delivered
	state atomic.Int32
}

const (
	callWaiting int32 = iota
	callDelivered
	callAbandoned
)

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func newCoalescer(s *Store, p *policy, max int) *coalescer {
	return &coalescer{s: s, p: p, script: batchScriptFor(p.spec), max: max}
}

// do makes one decision: directly when fewer than max script calls are in
// flight, else through the queue.
func (b *coalescer) do(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	b.mu.Lock()
	if b.flying < b.max {
		b.flying++
		b.mu.Unlock()
		d, err := b.s.eval(ctx, key, b.p, n)
		b.release()
		return d, err
	}
	c := callPool.Get().(*call)
	c.key, c.n = key, n
	c.state.Store(callWaiting)
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	cctx, cancel := b.s.callContext(ctx)
	if cancel != nil {
		defer cancel()
	}
	select {
	case <-c.done:
		return b.finish(c)
	case <-cctx.Done():
	}
	// Timed out or cancelled: leave the queue if still in it.
	b.mu.Lock()
	for i, q := range b.queue {
		if q == c {
			copy(b.queue[i:], b.queue[i+1:])
			b.queue[len(b.queue)-1] = nil
			b.queue = b.queue[:len(b.queue)-1]
			b.mu.Unlock()
			c.key = ""
			callPool.Put(c)
			return floodgate.Decision{}, cctx.Err()
		}
	}
	b.mu.Unlock()
	// A batch took it: the decision may be made or not. Abandon it unless
	// the result is already here.
	if c.state.CompareAndSwap(callWaiting, callAbandoned) {
		return floodgate.Decision{}, cctx.Err() // the batch runner recycles c
	}
	<-c.done
	return b.finish(c)
}

func (b *coalescer) finish(c *call) (floodgate.Decision, error) {
	d, err := c.d, c.err
	c.key, c.err = "", nil
	callPool.Put(c)
	return d, err
}

// release ends a script call; a worker takes over the queue if needed.
func (b *coalescer) release() {
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
func (b *coalescer) drain() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.flying--
			b.mu.Unlock()
			return
		}
		batch := b.queue
		if len(batch) > maxBatch {
			batch = batch[:maxBatch]
			rest := append(b.spare[:0], b.queue[maxBatch:]...)
			b.queue, b.spare = rest, nil
		} else {
			b.queue, b.spare = b.spare[:0], nil
		}
		b.mu.Unlock()
		b.runBatch(batch)
		clear(batch)
		b.mu.Lock()
		if b.spare == nil {
			b.spare = batch[:0]
		}
		b.mu.Unlock()
	}
}

// runBatch runs one batch script and delivers every result.
func (b *coalescer) runBatch(batch []*call) {
	keys := make([]string, len(batch))
	args := make([]string, 0, 1+len(b.p.args)+len(batch))
	args = append(args, b.s.injectedNow())
	args = append(args, b.p.args...)
	for i, c := range batch {
		keys[i] = b.s.redisKey(c.key, b.p.nsHex)
		args = append(args, strconv.FormatInt(c.n, 10))
	}
	b.batches.Add(1)
	b.batched.Add(int64(len(batch)))
	ctx := b.s.dl.get()
	arr, err := b.s.call(ctx, b.script, keys, args).ToArray()
	if err == nil && len(arr) != 6*len(batch) {
		err = errReply
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.d, c.err = decode(arr[6*i : 6*i+6])
		}
		if c.state.CompareAndSwap(callWaiting, callDelivered) {
			c.done <- struct{}{}
		} else { // abandoned by its caller
			c.key, c.err = "", nil
			callPool.Put(c)
		}
	}
}
