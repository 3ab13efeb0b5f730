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
	type kept struct {
		s  algo.State
		by algo.Algorithm // the version that wrote s
	}
	model := map[string]kept{}
	var history []algo.Algorithm // earlier current versions, newest first
	cur := versions[0]
	steps := []time.Duration{0, time.Microsecond, 999 * time.Microsecond, 7 * time.Millisecond, 300 * time.Millisecond, 3 * time.Second, time.Minute}
	keys := []string{"a", "b", "c", "d", "e"}
	for i := range 3000 {
		if r.IntN(40) == 0 {
			next := versions[r.IntN(len(versions))]
			// The earlier versions, one per namespace in memory, newest
			// first: with at most MaxPredecessors-1 versions, no key is
			// ever out of reach.
			ns := algo.MemoryNamespace(cur)
			history = slices.DeleteFunc(history, func(a algo.Algorithm) bool { return algo.MemoryNamespace(a) == ns })
			history = append([]algo.Algorithm{cur}, history...)
			lg, err := algo.Succeed(next, history)
			if err != nil {
				t.Fatalf("Succeed: %v", err)
			}
			cur = lg
		}
		s.advance(steps[r.IntN(len(steps))])
		now := micros.Of(s.cfg.clock.Now())
		key := keys[r.IntN(len(keys))]
		load := func(key string) algo.State {
			k, ok := model[key]
			if !ok {
				return algo.State{}
			}
			if !slices.Equal(algo.StateParams(k.by.Spec()), algo.StateParams(cur.Spec())) {
				return cur.(algo.Converter).Convert(k.s, now, k.by)
			}
			return k.s
		}
		keep := func(key string, next algo.State) {
			if next.W[0] <= now {
				delete(model, key)
				return
			}
			model[key] = kept{s: next, by: cur}
		}
		capacity := cur.Spec().Capacity
		if r.IntN(4) == 0 {
			// A group of two keys, all or nothing.
			k2 := keys[r.IntN(len(keys))]
			if k2 == key {
				continue
			}
			ops := []store.Op{{Key: key, Alg: cur, N: 1 + r.Int64N(capacity)}, {Key: k2, Alg: cur, N: 1}}
			commit := r.IntN(3) > 0
			all, got := applyAll(t, st, ops, commit)
			s1, d1 := cur.Step(load(key), now, ops[0].N)
			s2, d2 := cur.Step(load(k2), now, ops[1].N)
			if want := d1.Allowed && d2.Allowed; all != want {
				t.Fatalf("step %d: group on %s, %s decided %v, the model %v", i, key, k2, all, want)
			}
			if all && (got[0] != d1 || got[1] != d2) {
				t.Fatalf("step %d: group on %s, %s: store %+v %+v, model %+v %+v", i, key, k2, got[0], got[1], d1, d2)
			}
			switch {
			case all && commit:
				keep(key, s1)
				keep(k2, s2)
			case commit:
				// Refused: the keys written under other parameters are
				// kept converted, charged nothing.
				for _, k := range []string{key, k2} {
					if kk, ok := model[k]; ok && !slices.Equal(algo.StateParams(kk.by.Spec()), algo.StateParams(cur.Spec())) {
						keep(k, load(k))
					}
				}
			}
			continue
		}
		n := r.Int64N(capacity+3) - 2
		got := apply(t, st, key, cur, n)
		next, want := cur.Step(load(key), now, n)
		if got != want {
			t.Fatalf("step %d (key %s, n %d, params %v): store decided %+v, the model %+v", i, key, n, cur.Spec().Lua.Params, got, want)
		}
		keep(key, next)
	}
}
