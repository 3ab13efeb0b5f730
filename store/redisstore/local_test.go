package redisstore

import (
	"context"
	"sync"

	"github.com/floodgate-go/floodgate"
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

func (l *localStore) Apply(_ context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := hex16(alg.Spec().Namespace) + key
	s, d := alg.Step(l.m[k], floodgate.Nanotime()/1000, n)
	l.m[k] = s
	return d, nil
}
