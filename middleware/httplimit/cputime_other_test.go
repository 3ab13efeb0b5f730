//go:build !unix

package httplimit

import "time"

func cpuTime() time.Duration { return 0 }
