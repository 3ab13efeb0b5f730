//go:build unix

package httplimit

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used (user + system, all
// threads). Unlike wall time it does not grow while the process waits for a
// CPU, so it measures cost on a busy machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
