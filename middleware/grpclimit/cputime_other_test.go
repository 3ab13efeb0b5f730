//go:build !unix

package grpclimit

import "time"

// cpuTime is not measured on this platform; benchmarks then report no
// cpu-ns/op.
func cpuTime() time.Duration { return 0 }
