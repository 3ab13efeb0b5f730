package benchmarks

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
)

const drawMask = 1<<20 - 1

// numKeys is the key population of the keyed benchmarks: 1,000,000, or
// FLOODGATE_BENCH_KEYS (the test command's smoke run uses a small one).
var numKeys = func() int {
	if v, err := strconv.Atoi(os.Getenv("FLOODGATE_BENCH_KEYS")); err == nil && v > 1 {
		return v
	}
	return 1_000_000
}()

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
		z := rand.NewZipf(r, 1.1, 1, uint64(numKeys-1))
		zipfDraw = make([]int32, drawMask+1)
		for i := range zipfDraw {
			zipfDraw[i] = int32(z.Uint64())
		}
	})
	return allKeys, zipfDraw
}
