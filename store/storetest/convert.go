package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// RunConverter checks the live-change rule of [algo.Converter] on versions
// (algorithms of one limit with different parameters), for every ordered
// pair of them, on states that the older version's own steps (and its
// reserving twins', when it has them) leave over random sequences of times
// and costs, converted at random times:
//
//   - a key keeps the units it has left, capped by the new capacity: a
//     peek of the new version on the converted state reports
//     min(Remaining, new Limit) of the old version's peek; a state full at
//     now converts to a full one;
//   - converting changes no entry of the input's log and returns the same
//     state twice;
//   - the converted state is full within FullWithin, and the new version
//     steps it (a take, a peek, a refund) under the Decision invariants.
//
// Every version must Converts the others.
func RunConverter(t *testing.T, versions ...algo.Algorithm) {
	t.Helper()
	if len(versions) < 2 {
		t.Fatal("RunConverter needs at least two versions")
	}
	var cs []algo.Converter
	for _, v := range versions {
		c, ok := v.(algo.Converter)
		if !ok {
			t.Fatalf("%s is not an algo.Converter", v.Spec().Name)
		}
		cs = append(cs, c)
	}
	r := rand.New(rand.NewPCG(uint64(len(versions)), versions[0].Spec().Namespace))
	for i, from := range cs {
		for j, to := range cs {
			if i == j {
				continue
			}
			if !to.Converts(from) {
				t.Fatalf("version %d does not convert version %d", j, i)
			}
			for seq := range 200 {
				s, now := randomState(r, from, 1+r.IntN(40))
				now = randomMove(r, now)
				if msg := checkConvert(from, to, s, now); msg != "" {
					t.Fatalf("%s params %v -> %v, sequence %d, state %v %v at %d: %s",
						from.Spec().Name, from.Spec().Lua.Params, to.Spec().Lua.Params, seq, s.W[:from.Spec().Words], s.Log, now, msg)
				}
			}
		}
	}
}

func checkConvert(from, to algo.Converter, s algo.State, now int64) string {
	logBefore := slices.Clone(s.Log)
	got := to.Convert(s, now, from)
	if !slices.Equal(s.Log, logBefore) {
		return "Convert changed the input log"
	}
	if again := to.Convert(s, now, from); !sameState(again, got) {
		return fmt.Sprintf("Convert is not deterministic: %v then %v", got, again)
	}
	_, old := from.Step(s, now, 0)
	_, fresh := to.Step(algo.State{}, now, 0)
	want := min(old.Remaining, fresh.Limit)
	if s.W[0] <= now {
		want = fresh.Limit
	}
	_, d := to.Step(got, now, 0)
	if p := decisionProblem(d); p != "" {
		return "peek after Convert: " + p
	}
	if d.Remaining != want {
		return fmt.Sprintf("converted state %v %v has %d left, want %d (old version: %d of %d)", got.W, got.Log, d.Remaining, want, old.Remaining, old.Limit)
	}
	if got.W[0] > now && got.W[0]-now > to.FullWithin() {
		return fmt.Sprintf("converted state full in %dus, beyond FullWithin %dus", got.W[0]-now, to.FullWithin())
	}
	if sp := to.Spec(); sp.MaxLog > 0 && len(got.Log) > sp.MaxLog {
		return fmt.Sprintf("converted log of %d entries, above MaxLog %d", len(got.Log), sp.MaxLog)
	}
	for _, n := range []int64{1, 0, -1} {
		if _, d := to.Step(got, now, n); decisionProblem(d) != "" {
			return fmt.Sprintf("step %d after Convert: %s", n, decisionProblem(d))
		}
	}
	return ""
}

func sameState(a, b algo.State) bool {
	return a.W == b.W && slices.Equal(a.Log, b.Log)
}

// randomState steps alg (and its reserving twins) from a fresh state over
// steps random (time, cost) pairs and returns the state and the time.
func randomState(r *rand.Rand, alg algo.Algorithm, steps int) (algo.State, int64) {
	_, fresh := alg.Step(algo.State{}, 0, 0)
	capacity := max(fresh.Limit, 1)
	var s algo.State
	now := int64(1_700_000_000_000_000) + r.Int64N(int64(time.Hour/time.Microsecond))
	res, _ := alg.(algo.Reservable)
	for range steps {
		now = randomMove(r, now)
		n := 1 + r.Int64N(min(capacity, 4))
		switch x := r.IntN(100); {
		case x < 8:
			n = capacity
		case x < 14:
			n = -(1 + r.Int64N(capacity))
		case x < 18:
			n = 0
		}
		var a algo.Algorithm = alg
		if res != nil && n > 0 && r.IntN(5) == 0 {
			a = res.Reserve(r.Int64N(int64(time.Hour / time.Microsecond)))
		}
		s, _ = a.Step(s, now, n)
	}
	return s, now
}

// RunConversion checks how a store carries keys over a live change (see
// [algo.Lineage]): versions are algorithms of one limit with different
// parameters, all [algo.Converter]s. Over random sequences of times, keys,
// costs and changes of version (each change makes a version the current
// one, through [algo.Succeed] with the versions current before it as
// predecessors, newest first, at most [algo.MaxPredecessors]), every
// decision the store makes, by Apply and by ApplyAll, must be the one of a
// model that converts a key's state ([algo.Converter.Convert]) at the
// key's first request after a change (a refused group keeps the
// conversion, charged nothing; an evaluation keeps nothing), unless the
// state was written with the same parameters ([algo.StateParams]). It needs [WithClock] and 2 to
// [algo.MaxPredecessors]-1 versions.
func RunConversion(t *testing.T, newStore func(t *testing.T) store.Store, versions []algo.Algorithm, opts ...Option) {
	t.Helper()
	s := newSuite(newStore, opts)
	if !s.exact() {
		t.Skip("RunConversion needs WithClock")
	}
	if len(versions) < 2 || len(versions) >= algo.MaxPredecessors {
		t.Fatalf("RunConversion needs 2..%d versions", algo.MaxPredecessors-1)
	}
	st := s.newStore(t)
	r := rand.New(rand.NewPCG(7, versions[0].Spec().Namespace))
	m := &conversionModel{t: t, st: st, cur: versions[0], states: map[string]keptState{}}
	steps := []time.Duration{0, time.Microsecond, 999 * time.Microsecond, 7 * time.Millisecond, 300 * time.Millisecond, 3 * time.Second, time.Minute}
	keys := []string{"a", "b", "c", "d", "e"}
	for i := range 3000 {
		if r.IntN(40) == 0 {
			m.change(versions[r.IntN(len(versions))])
		}
		s.advance(steps[r.IntN(len(steps))])
		m.now = micros.Of(s.cfg.clock.Now())
		key := keys[r.IntN(len(keys))]
		capacity := m.cur.Spec().Capacity
		if r.IntN(4) == 0 {
			// A group of two keys, all or nothing.
			if k2 := keys[r.IntN(len(keys))]; k2 != key {
				m.group(i, key, k2, 1+r.Int64N(capacity), r.IntN(3) > 0)
			}
			continue
		}
		m.single(i, key, r.Int64N(capacity+3)-2)
	}
}

// keptState is a key's state in a conversionModel, and the version of the
// algorithm that wrote it.
type keptState struct {
	s  algo.State
	by algo.Algorithm
}

// conversionModel is RunConversion's model of a store across changes of
// version: each key's state as the version that wrote it left it,
// converted on its next use.
type conversionModel struct {
	t       *testing.T
	st      store.Store
	states  map[string]keptState
	history []algo.Algorithm // earlier current versions, newest first
	cur     algo.Algorithm
	now     int64
}

// change makes next the current version, succeeding the earlier ones.
func (m *conversionModel) change(next algo.Algorithm) {
	// The earlier versions, one per namespace in memory, newest first:
	// with at most MaxPredecessors-1 versions, no key is ever out of
	// reach.
	ns := algo.MemoryNamespace(m.cur)
	m.history = slices.DeleteFunc(m.history, func(a algo.Algorithm) bool { return algo.MemoryNamespace(a) == ns })
	m.history = append([]algo.Algorithm{m.cur}, m.history...)
	lg, err := algo.Succeed(next, m.history)
	if err != nil {
		m.t.Fatalf("Succeed: %v", err)
	}
	m.cur = lg
}

// stale reports whether k was written under other state parameters than
// the current version's.
func (m *conversionModel) stale(k keptState) bool {
	return !slices.Equal(algo.StateParams(k.by.Spec()), algo.StateParams(m.cur.Spec()))
}

// load returns key's state for the current version.
func (m *conversionModel) load(key string) algo.State {
	k, ok := m.states[key]
	if !ok {
		return algo.State{}
	}
	if m.stale(k) {
		return m.cur.(algo.Converter).Convert(k.s, m.now, k.by)
	}
	return k.s
}

// keep records next as key's state, written by the current version.
func (m *conversionModel) keep(key string, next algo.State) {
	if next.W[0] <= m.now {
		delete(m.states, key)
		return
	}
	m.states[key] = keptState{s: next, by: m.cur}
}

// group checks step i, a group of n on key and 1 on k2, all or nothing,
// against the model.
func (m *conversionModel) group(i int, key, k2 string, n int64, commit bool) {
	t := m.t
	ops := []store.Op{{Key: key, Alg: m.cur, N: n}, {Key: k2, Alg: m.cur, N: 1}}
	all, got := applyAll(t, m.st, ops, commit)
	s1, d1 := m.cur.Step(m.load(key), m.now, ops[0].N)
	s2, d2 := m.cur.Step(m.load(k2), m.now, ops[1].N)
	if want := d1.Allowed && d2.Allowed; all != want {
		t.Fatalf("step %d: group on %s, %s decided %v, the model %v", i, key, k2, all, want)
	}
	if all && (got[0] != d1 || got[1] != d2) {
		t.Fatalf("step %d: group on %s, %s: store %+v %+v, model %+v %+v", i, key, k2, got[0], got[1], d1, d2)
	}
	switch {
	case all && commit:
		m.keep(key, s1)
		m.keep(k2, s2)
	case commit:
		// Refused: the keys written under other parameters are kept
		// converted, charged nothing.
		for _, k := range []string{key, k2} {
			if kk, ok := m.states[k]; ok && m.stale(kk) {
				m.keep(k, m.load(k))
			}
		}
	}
}

// single checks step i, n on key alone, against the model.
func (m *conversionModel) single(i int, key string, n int64) {
	got := apply(m.t, m.st, key, m.cur, n)
	next, want := m.cur.Step(m.load(key), m.now, n)
	if got != want {
		m.t.Fatalf("step %d (key %s, n %d, params %v): store decided %+v, the model %+v", i, key, n, m.cur.Spec().Lua.Params, got, want)
	}
	m.keep(key, next)
}
