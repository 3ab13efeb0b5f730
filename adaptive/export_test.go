package adaptive

// Limit returns the current limit, without the side effects of Stats.
func (l *Gate) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// InFlight returns the number of tokens in flight, without the side
// effects of Stats.
func (l *Gate) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight
}
