package benchmarks

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

const (
	numKeys  = 1_000_000
	drawMask = 1<<20 - 1
)

var (
	keysOnce sync.Once
	allKeys  []string // numKeys distinct keys
	zipfDraw []int32  // drawMask+1 indices into allKeys, Zipf distributed
)

// zipfKeys returns the 1,000,000 keys and a table of Zipf-distributed draws
// (s = 1.1, the skew of real per-client traffic: a few hot clients, a long
// tail). Built once per process; deterministic.
func zipfKeys() ([]string, []int32) {
	keysOnce.Do(func() {
		allKeys = make([]string, numKeys)
		for i := range allKeys {
			allKeys[i] = fmt.Sprintf("client:%07d", i)
		}
		r := rand.New(rand.NewPCG(1, 2))
		z := rand.NewZipf(r, 1.1, 1, numKeys-1)
		zipfDraw = make([]int32, drawMask+1)
		for i := range zipfDraw {
			zipfDraw[i] = int32(z.Uint64())
		}
	})
	return allKeys, zipfDraw
}
