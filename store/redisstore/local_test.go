package redisstore

import (
	"context"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// localStore is a minimal in-process store.Store (one mutex, one map) used as
// the fallback in the fault tests, so that these tests depend on nothing but
// the store contract.
type localStore struct {
	mu sync.Mutex
	m  map[string]algo.State
}

func newLocalStore() *localStore { return &localStore{m: map[string]algo.State{}} }

func localKey(key string, alg algo.Algorithm) string { return hex16(alg.Spec().Namespace) + key }

func (l *localStore) Apply(_ context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := localKey(key, alg)
	s, d := alg.Step(l.m[k], monotime.Nanotime()/1000, n)
	l.m[k] = s
	return d, nil
}

// ApplyAll steps every op on a copy of the states and keeps the copies only
// when commit is set and every op admitted.
func (l *localStore) ApplyAll(_ context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := monotime.Nanotime() / 1000
	next := map[string]algo.State{}
	all := true
	for i, op := range ops {
		k := localKey(op.Key, op.Alg)
		s, ok := next[k]
		if !ok {
			s = l.m[k]
		}
		next[k], out[i] = op.Alg.Step(s, now, op.N)
		all = all && out[i].Allowed
	}
	if all && commit {
		for k, s := range next {
			l.m[k] = s
		}
	}
	return all, nil
}
