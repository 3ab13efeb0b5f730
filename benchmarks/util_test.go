package benchmarks

import (
	"runtime"
	"sync/atomic"
)

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

func nextSeed(p *int64) int64 { return atomic.AddInt64(p, 1) }
