package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/store"
)

// ApplyAll implements [store.Store]: the ops go to Redis in one FCALL (or
// EVALSHA) of a script that embeds the Lua twin of every algorithm among them. The
// script reads the server's TIME once, loads every op's key, steps the ops
// in order (ops on the same key and namespace each on the state the
// previous one left) and, when commit is set and every op admitted, writes
// every state back with its own TTL (its time to full), else writes
// nothing but the keys written with other parameters (a live change),
// which a commit keeps converted and charged nothing so that the new
// parameters apply from their first request after the change. It replies
// with every op's decision. It is atomic: no other call
// on any of the keys sees a partial group. The ops of floodgate.TakeAll
// over several limits on one key are one such call.
//
// On Redis Cluster the keys of one script must share a hash slot. The keys
// of one user key always do (they share a hash tag), so ops on one user key
// are one script, as on a single node. Ops on user keys in different slots
// are decided in two phases: every slot's ops are first evaluated (one
// script per slot, with commit off, all sent together); when every op
// admits and commit is set, every slot's ops are committed (one atomic
// script per slot, sent together), each slot deciding again on its state
// at that moment. When a slot refuses at commit (a concurrent call took
// units between the two phases) the ops of the slots that committed are
// refunded (a negative cost, never beyond full), and the call reports a
// refusal with every op's decision from the commit phase. That window
// between the phases, and the refund, are the only places where a group is
// not atomic: a concurrent call may see the units taken on one slot and
// not yet refunded. A slot that fails at commit (Redis did not answer in
// time) may or may not have committed; the other slots are refunded and the
// call goes to the failure policy.
//
// When Redis cannot decide, the failure policy applies to the whole call,
// and every op's decision is the one [Store.Apply] gives under it
// (Decision.Fallback set): [FailOpen] admits every op and [FailClosed]
// refuses every op, each with the blanket answer of Limit 0 (no quota to
// advertise), [Fallback] runs ApplyAll on the local store with the local
// algorithms (atomic there), and one event is reported to the observer,
// with the cause. Ops need a cost n >= 1 and an algorithm with a
// Lua twin; two ops on the same key and namespace must have the same state
// shape (Words, MaxLog).
func (s *Store) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	var start int64
	if s.observer != nil {
		start = monotime.Nanotime()
	}
	if len(out) < len(ops) {
		return false, fmt.Errorf("%w: redisstore: ApplyAll with %d ops and %d decisions", floodgate.ErrInvalidConfig, len(ops), len(out))
	}
	if len(ops) == 0 {
		return true, nil
	}
	var pbuf [8]*policy
	ps := pbuf[:0]
	for i := range ops {
		if ops[i].N < 1 {
			return false, fmt.Errorf("%w: redisstore: op %d has cost %d, want >= 1", floodgate.ErrInvalidCost, i, ops[i].N)
		}
		p, err := s.prepare(ops[i].Alg)
		if err != nil {
			return false, fmt.Errorf("redisstore: op %d: %w", i, err)
		}
		ps = append(ps, p)
	}
	gs, err := s.plan(ops, ps)
	if err != nil {
		return false, err
	}
	sent, err := s.admit()
	if err == nil {
		var all bool
		all, err = s.run(ctx, gs, out, commit)
		s.brk.done(sent, err, ctx.Err() != nil)
		if err == nil {
			return all, nil
		}
	}
	return s.failAll(ctx, ops, ps, out, commit, err, start)
}

// The modes of the group script (ARGV[2]).
const (
	modeEvaluate  = "0" // keep nothing
	modeCommit    = "1" // keep every state when every op admits, else the conversions
	modeKeepEvery = "2" // keep every state (refunds; Apply)
	modeMove      = "3" // evaluate for a commit: keep only the conversions
)

// group is the part of an ApplyAll call that one script runs: ops whose
// keys share a hash slot.
type group struct {
	idx    []int    // the ops of the group, in call order; nil: every op
	n      int      // the number of ops
	keys   []string // KEYS: one per distinct (key, namespace)
	args   []string // ARGV; args[1] is the mode
	opsAt  int      // index in args of the first op's fields (key, policy, cost)
	script *script
	twins  []uint16 // the script's twins, sorted
}

// op returns the index in the call of the group's j-th op.
func (g *group) op(j int) int {
	if g.idx == nil {
		return j
	}
	return g.idx[j]
}

// plan splits ops into the groups of one script each: one group, unless
// the client is a Cluster client and the keys fall into several slots.
func (s *Store) plan(ops []store.Op, ps []*policy) ([]group, error) {
	if s.state.Load() == stateUp && s.cluster { // cluster is set before the state goes up (Dial)
		first := slotOf(ops[0].Key)
		for i := 1; i < len(ops); i++ {
			if slotOf(ops[i].Key) != first {
				return s.planSlots(ops, ps)
			}
		}
	}
	g, err := s.buildGroup(ops, ps, nil)
	return []group{g}, err
}

// planSlots makes one group per hash slot, in the order of first use.
func (s *Store) planSlots(ops []store.Op, ps []*policy) ([]group, error) {
	var slots []uint16
	var idxs [][]int
	for i := range ops {
		sl := slotOf(ops[i].Key)
		k := slices.Index(slots, sl)
		if k < 0 {
			slots = append(slots, sl)
			idxs = append(idxs, nil)
			k = len(slots) - 1
		}
		idxs[k] = append(idxs[k], i)
	}
	gs := make([]group, len(idxs))
	for k, idx := range idxs {
		var err error
		if gs[k], err = s.buildGroup(ops, ps, idx); err != nil {
			return nil, err
		}
	}
	return gs, nil
}

// buildGroup makes the KEYS and ARGV of the group script for the ops idx
// (nil: every op).
func (s *Store) buildGroup(ops []store.Op, ps []*policy, idx []int) (group, error) {
	g := group{idx: idx, n: len(idx)}
	if idx == nil {
		g.n = len(ops)
	}
	type entry struct {
		key string
		p   *policy // the first policy on the key: its namespace and shape
	}
	var ebuf [8]entry
	var pbuf [8]*policy
	var tbuf [8]uint16
	entries, pols, ids := ebuf[:0], pbuf[:0], tbuf[:0]
	opArgs := make([]string, 0, 3*g.n)
	for j := range g.n {
		i := g.op(j)
		key, p := ops[i].Key, ps[i]
		e := slices.IndexFunc(entries, func(e entry) bool { return e.key == key && e.p.spec.Namespace == p.spec.Namespace })
		if e < 0 {
			entries = append(entries, entry{key, p})
			e = len(entries) - 1
		} else if q := entries[e].p; q.spec.Words != p.spec.Words || q.spec.MaxLog != p.spec.MaxLog {
			return g, fmt.Errorf("%w: redisstore: ops %q and %q share a key and a namespace with different state shapes", floodgate.ErrInvalidConfig, q.spec.Name, p.spec.Name)
		}
		k := slices.Index(pols, p)
		if k < 0 {
			pols = append(pols, p)
			k = len(pols) - 1
			if !slices.Contains(ids, p.twin) {
				ids = append(ids, p.twin)
			}
		}
		opArgs = append(opArgs, strconv.Itoa(e+1), strconv.Itoa(k+1), strconv.FormatInt(ops[i].N, 10))
	}
	slices.Sort(ids)
	g.script = scriptFor(kindGroup, ids)
	g.twins = slices.Clone(ids)
	g.keys = make([]string, len(entries))
	for e, en := range entries {
		g.keys[e] = s.redisKey(en.key, en.p.nsHex)
	}
	size := 3 + len(opArgs)
	for _, p := range pols {
		size += 1 + len(p.args)
	}
	g.args = make([]string, 0, size)
	g.args = append(g.args, s.injectedNow(), modeEvaluate, strconv.Itoa(len(pols)))
	for _, p := range pols {
		g.args = append(g.args, strconv.Itoa(slices.Index(ids, p.twin)+1))
		g.args = append(g.args, p.args...)
	}
	g.opsAt = len(g.args)
	g.args = append(g.args, opArgs...)
	return g, nil
}

// refund returns the group that gives back what g took: the same ops with
// negated costs, every state kept.
func (g *group) refund() group {
	r := *g
	r.args = slices.Clone(g.args)
	r.args[1] = modeKeepEvery
	for j := range g.n {
		r.args[g.opsAt+3*j+2] = "-" + g.args[g.opsAt+3*j+2]
	}
	return r
}

// peek returns the group that looks at g's keys: the same ops with cost 0,
// nothing kept.
func (g *group) peek() group {
	r := *g
	r.args = slices.Clone(g.args)
	r.args[1] = modeEvaluate
	for j := range g.n {
		r.args[g.opsAt+3*j+2] = "0"
	}
	return r
}

// run decides the groups: one script for one group; evaluate then commit
// for several.
func (s *Store) run(ctx context.Context, gs []group, out []floodgate.Decision, commit bool) (bool, error) {
	if len(gs) == 1 {
		return s.runOne(ctx, &gs[0], out, commit)
	}
	res := make([]result, len(gs))
	eval := modeEvaluate
	if commit {
		eval = modeMove // a refusal keeps the conversions, as one script's does
	}
	s.execAll(ctx, gs, eval, out, res)
	all := true
	var errs []error
	for _, r := range res {
		all = all && r.all
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if len(errs) == 0 && !all {
		errs = s.peekFitting(ctx, gs, res, out)
	}
	if len(errs) > 0 || !all || !commit {
		return all, errors.Join(errs...)
	}
	if s.between != nil {
		s.between()
	}
	return s.commitAll(ctx, gs, out, res)
}

// peekFitting reports, for a refused call, the keys of the slots whose ops
// all fit as they stand (one more evaluation, of peeks), as a single
// script does; it returns the errors of that evaluation.
func (s *Store) peekFitting(ctx context.Context, gs []group, res []result, out []floodgate.Decision) []error {
	var peeks []group
	for k, r := range res {
		if r.all {
			peeks = append(peeks, gs[k].peek())
		}
	}
	pres := make([]result, len(peeks))
	s.execAll(ctx, peeks, modeEvaluate, out, pres)
	var errs []error
	for _, r := range pres {
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	return errs
}

// commitAll commits the groups that all evaluated as fitting; when a slot
// refuses (a concurrent call got in between the phases) or fails, it gives
// back what the others took.
func (s *Store) commitAll(ctx context.Context, gs []group, out []floodgate.Decision, res []result) (bool, error) {
	s.execAll(ctx, gs, modeCommit, out, res)
	var back []group
	var errs []error
	for k, r := range res {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.all:
			back = append(back, gs[k].refund())
		}
	}
	if len(back) == len(gs) {
		return true, nil
	}
	scratch := make([]floodgate.Decision, len(out))
	rres := make([]result, len(back))
	s.execAll(context.WithoutCancel(ctx), back, modeKeepEvery, scratch, rres)
	for _, r := range rres {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("redisstore: refund after a refused commit: %w", r.err))
		}
	}
	return false, errors.Join(errs...)
}

// runOne decides a call of one group: one script, coalesced with other
// calls of the same script where the store coalesces.
func (s *Store) runOne(ctx context.Context, g *group, out []floodgate.Decision, commit bool) (bool, error) {
	mode := modeEvaluate
	if commit {
		mode = modeCommit
	}
	if s.coalesce > 0 && !s.cluster {
		return s.groupCoalescerFor(g).do(ctx, g, mode, out)
	}
	return s.exec(ctx, g, mode, out)
}

// result is what one group's script reported.
type result struct {
	all bool
	err error
}

// execAll runs every group's script in mode, concurrently (on a Cluster
// they go to their nodes in parallel), and writes each group's outcome to
// res.
func (s *Store) execAll(ctx context.Context, gs []group, mode string, out []floodgate.Decision, res []result) {
	if len(gs) == 0 {
		return
	}
	var wg sync.WaitGroup
	for k := 1; k < len(gs); k++ {
		wg.Go(func() { res[k].all, res[k].err = s.exec(ctx, &gs[k], mode, out) })
	}
	res[0].all, res[0].err = s.exec(ctx, &gs[0], mode, out)
	wg.Wait()
}

// exec runs g's script in mode and writes its ops' decisions to out.
func (s *Store) exec(ctx context.Context, g *group, mode string, out []floodgate.Decision) (bool, error) {
	g.args[1] = mode
	cctx, cancel := s.callContext(ctx)
	if cancel != nil {
		defer cancel()
	}
	arr, err := s.call(cctx, g.script, g.keys, g.args).ToArray()
	if err != nil {
		return false, err
	}
	return decodeGroup(arr, g, out)
}

// decodeGroup reads the reply of g's script (rungroup's) into out.
func decodeGroup(arr []rueidis.RedisMessage, g *group, out []floodgate.Decision) (bool, error) {
	if len(arr) != 1+6*g.n {
		return false, errReply
	}
	all, err := arr[0].AsInt64()
	if err != nil {
		return false, fmt.Errorf("%w: %w", errReply, err)
	}
	for j := range g.n {
		if out[g.op(j)], err = decode(arr[1+6*j:]); err != nil {
			return false, err
		}
	}
	return all == 1, nil
}

// failAll applies the failure policy to an ApplyAll call that Redis could
// not decide.
func (s *Store) failAll(ctx context.Context, ops []store.Op, ps []*policy, out []floodgate.Decision, commit bool, cause error, start int64) (bool, error) {
	cause, handle := s.failure(ctx, cause)
	if !handle {
		return false, cause
	}
	all := true
	var outcome floodgate.Outcome
	switch s.policy.mode {
	case modeOpen:
		// Limit 0: a blanket answer, as Apply's.
		for i := range ops {
			out[i] = floodgate.Decision{Allowed: true, Fallback: true}
		}
		outcome = floodgate.OutcomeErrorOpen
	case modeClosed:
		for i := range ops {
			out[i] = floodgate.Decision{Fallback: true, RetryAfter: s.policy.retryAfter}
		}
		all = false
		outcome = floodgate.OutcomeErrorClosed
	case modeFallback:
		local := make([]store.Op, len(ops))
		for i := range ops {
			local[i] = store.Op{Key: ops[i].Key, Alg: ps[i].local, N: ops[i].N}
		}
		var err error
		if all, err = s.policy.local.ApplyAll(ctx, local, out, commit); err != nil {
			return false, errors.Join(cause, fmt.Errorf("redisstore: fallback: %w", err))
		}
		for i := range ops {
			out[i].Fallback = true
		}
		outcome = floodgate.OutcomeFallback
	default:
		return false, cause
	}
	d := out[0]
	for i := range ops {
		if !out[i].Allowed {
			d = out[i]
			break
		}
	}
	s.report(outcome, d, cause, start)
	return all, nil
}
