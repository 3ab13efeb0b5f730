package redisstore

import (
	"context"
	"fmt"
	"slices"
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
// that appears twice sees its own earlier call) and one SET per key after
// its last call, all atomically. Each decision is still made by exactly one
// script run, in one round trip once it leaves the queue, with the same
// semantics as alone (the calls of one batch on one key see each other in
// order).
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

// scriptBatchWordBody is scriptBatchBody for an algorithm whose state is
// one word (the token bucket), written for the server's time per decision
// (Redis runs one script at a time, so it is the throughput of a busy
// limiter). ARGV: the injected time or the empty string, the policy, "d"
// when the batch's keys are distinct (runBatch checks) else the empty
// string, the costs. With distinct keys each key is read, stepped and
// written in turn, with no table of states: one step table reused, the
// decision's numbers written to the reply without a loop. Else a key's
// state is a number between the calls of the batch, kept by key. A value
// as the store writes it ("w|params") is read with one match (wordOf), any
// other through load. Same semantics as scriptBatchBody: save's rules
// (putWord).
const scriptBatchWordBody = `
local test, now = clock(ARGV[1])
local q = policy('1', ARGV[2])
local p, pstr, conv, vf = q[4], q[5], q[6], q[7]
local vals = redis.call('MGET', unpack(KEYS))
local out, sb = {}, {0}
if ARGV[3] == 'd' then
  for i = 1, #KEYS do
    local v = vals[i]
    local w, ow = 0, nil
    if v then w, ow = wordOf(v, q, pstr, conv, p, now) end
    sb[1] = w
    local s2, d = step(sb, now, smallint[ARGV[i + 3]] or tonumber(ARGV[i + 3]), p)
    local o = i * 6 - 6
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = d[1], d[2], d[3], d[4], d[5], d[6]
    putWord(KEYS[i], s2[1], now, test, vf, v, ow)
  end
  return out
end
local st, raw, ow = {}, {}, {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local w = st[key]
  if not w then
    local v = vals[i]
    raw[key] = v
    w = 0
    if v then w, ow[key] = wordOf(v, q, pstr, conv, p, now) end
  end
  sb[1] = w
  local s2, d = step(sb, now, smallint[ARGV[i + 3]] or tonumber(ARGV[i + 3]), p)
  st[key] = s2[1]
  local o = i * 6 - 6
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = d[1], d[2], d[3], d[4], d[5], d[6]
end
for key, w in pairs(st) do
  putWord(key, w, now, test, vf, raw[key], ow[key])
end
return out
`

// luaBatchWord defines wordOf and putWord, the read and the write of a
// one-word state for scriptBatchWordBody (in its prelude: a function
// defined in a body is a closure made on every call).
const luaBatchWord = `
-- wordOf returns the state word of value v (not false) for policy q
-- (pstr, conv, p: its parameters, convert and Params), converted when it
-- was written with other parameters, and the word v held (nil: v is not
-- in the store's format).
local function wordOf(v, q, pstr, conv, p, now)
  local a, ps = string.match(v, '^(%-?%d+)|(.*)$')
  if not ps then
    local s, _, w0 = load(v, q, now)
    return s[1], w0
  end
  local w = tonumber(a)
  if ps ~= pstr and conv then
    local op = {}
    for x in string.gmatch(ps, '[^,]+') do op[#op + 1] = tonumber(x) end
    return conv({w}, now, op, p)[1], w
  end
  return w, w
end
-- putWord writes word w to key as save does: deleted when full (if old,
-- the value the key held, is not false), left alone when the value is
-- the same, written with KEEPTTL when its time to full is the one the key
-- held (ow), else with a TTL of its time to full (at least a minute with
-- an injected time). The TTL is formatted as an integer here: a number
-- given to redis.call is converted by the server with %.17g (fpconv_dtoa
-- from Redis 7.2), which costs it more than string.format('%d').
local function putWord(key, w, now, test, vf, old, ow)
  if w <= now then
    if old then redis.call('DEL', key) end
    return
  end
  local v = string.format(vf, w)
  if test then
    local ttl = math.floor((w - now + 999) / 1000)
    if ttl < 60000 then ttl = 60000 end
    redis.call('SET', key, v, 'PX', string.format('%d', ttl))
  elseif v ~= old then
    if w == ow then
      redis.call('SET', key, v, 'KEEPTTL')
    else
      redis.call('SET', key, v, 'PX', string.format('%d', math.floor((w - now + 999) / 1000)))
    end
  end
end
`

// batchScripts caches the batch script per (Name, Source, one word).
var batchScripts sync.Map // string -> *script

func batchScriptFor(sp algo.Spec) *script {
	oneWord := sp.Words == 1 && sp.MaxLog == 0
	key := sp.Name + "\x00" + sp.Lua.Source + "\x00" + strconv.FormatBool(oneWord)
	if l, ok := batchScripts.Load(key); ok {
		return l.(*script)
	}
	prelude := fmt.Sprintf("-- floodgate redisstore batch script: %s\nlocal step, convert = (function()\n%s\nend)()\nlocal steps, converts = {step}, {convert}\n%s", sp.Name, sp.Lua.Source, luaCommon)
	body := scriptBatchBody
	if oneWord {
		prelude += luaBatchWord
		body = scriptBatchWordBody
	}
	l, _ := batchScripts.LoadOrStore(key, newScript(prelude, body))
	return l.(*script)
}

// maxBatch bounds the calls of one batch script.
const maxBatch = 256

// coalescer queues the calls of one policy beyond max in flight.
type coalescer struct {
	s      *Store
	p      *policy
	script *script
	q      inflight[*call]

	batches, batched atomic.Int64 // batch scripts run, calls they carried (tests)
}

// inflight counts a coalescer's script calls in flight (direct or batch)
// and queues the calls beyond max; when a script call ends with calls
// waiting, a worker (drain) runs them, at most limit to a batch, until the
// queue is empty. Shared by the coalescers of single calls and of groups.
type inflight[T comparable] struct {
	max, limit int
	run        func([]T) // runs a batch and delivers every result

	mu     sync.Mutex
	queue  []T
	spare  []T
	flying int
}

// enter takes an in-flight slot and returns true when one is free (the
// caller runs its own script, then calls release); else it queues mk()'s
// call and returns it.
func (f *inflight[T]) enter(mk func() T) (T, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.flying < f.max {
		f.flying++
		var none T
		return none, true
	}
	c := mk()
	f.queue = append(f.queue, c)
	return c, false
}

// leave takes c out of the queue; false when a batch took it already.
func (f *inflight[T]) leave(c T) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.queue, c)
	if i < 0 {
		return false
	}
	f.queue = slices.Delete(f.queue, i, i+1)
	return true
}

// release ends a script call; a worker takes over the queue if needed.
func (f *inflight[T]) release() {
	f.mu.Lock()
	if len(f.queue) > 0 {
		f.mu.Unlock()
		go f.drain()
		return
	}
	f.flying--
	f.mu.Unlock()
}

// drain runs batches until the queue is empty. It owns one of the in-flight
// slots.
func (f *inflight[T]) drain() {
	for {
		f.mu.Lock()
		if len(f.queue) == 0 {
			f.flying--
			f.mu.Unlock()
			return
		}
		batch := f.queue
		if len(batch) > f.limit {
			batch = batch[:f.limit]
			rest := append(f.spare[:0], f.queue[f.limit:]...)
			f.queue, f.spare = rest, nil
		} else {
			f.queue, f.spare = f.spare[:0], nil
		}
		f.mu.Unlock()
		f.run(batch)
		clear(batch)
		f.mu.Lock()
		if f.spare == nil {
			f.spare = batch[:0]
		}
		f.mu.Unlock()
	}
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
	b := &coalescer{s: s, p: p, script: batchScriptFor(p.spec)}
	b.q = inflight[*call]{max: max, limit: maxBatch, run: b.runBatch}
	return b
}

// do makes one decision: directly when fewer than max script calls are in
// flight, else through the queue.
func (b *coalescer) do(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	c, direct := b.q.enter(func() *call {
		c := callPool.Get().(*call)
		c.key, c.n = key, n
		c.state.Store(callWaiting)
		return c
	})
	if direct {
		d, err := b.s.eval(ctx, key, b.p, n)
		b.q.release()
		return d, err
	}

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
	if b.q.leave(c) {
		c.key = ""
		callPool.Put(c)
		return floodgate.Decision{}, cctx.Err()
	}
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

// runBatch runs one batch script and delivers every result.
func (b *coalescer) runBatch(batch []*call) {
	keys := make([]string, len(batch))
	args := make([]string, 0, 2+len(b.p.args)+len(batch))
	args = append(args, b.s.injectedNow())
	args = append(args, b.p.args...)
	if b.p.oneWord {
		args = append(args, "") // "d" when the keys are distinct, below
	}
	for i, c := range batch {
		keys[i] = b.s.redisKey(c.key, b.p.nsHex)
		args = append(args, strconv.FormatInt(c.n, 10))
	}
	if b.p.oneWord && distinct(keys) {
		args[1+len(b.p.args)] = "d"
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

// distinct reports whether no key appears twice in keys.
func distinct(keys []string) bool {
	if len(keys) <= 8 {
		for i := 1; i < len(keys); i++ {
			if slices.Contains(keys[:i], keys[i]) {
				return false
			}
		}
		return true
	}
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, dup := seen[k]; dup {
			return false
		}
		seen[k] = struct{}{}
	}
	return true
}
