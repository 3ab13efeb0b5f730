package policy

import "time"

// SetClock makes l read now for the lineages' expiry.
func SetClock(l *Live, now func() time.Time) {
	l.mu.Lock()
	l.now = now
	l.mu.Unlock()
}

// Retire runs what l's timer runs.
func Retire(l *Live) { l.retire() }

// SetLeaseGrace sets how long a replaced lease limiter serves, and returns
// the function that restores it.
func SetLeaseGrace(d time.Duration) func() {
	old := leaseGrace
	leaseGrace = d
	return func() { leaseGrace = old }
}

// SetTakeHook makes Live.Take call f between its load of the running Set
// and its store call, and returns the function that removes it.
func SetTakeHook(f func()) func() {
	takeHook = f
	return func() { takeHook = nil }
}

// ParseRate and FormatRate read and write a rate as config files do.
var (
	ParseRate  = parseRate
	FormatRate = formatRate
)
