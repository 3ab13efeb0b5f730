package memstore

// SweeperState reports whether s's background sweeper goroutine has
// started, and returns the channel closed when it returns.
func SweeperState(s *Store) (started bool, done <-chan struct{}) {
	s.sw.mu.Lock()
	defer s.sw.mu.Unlock()
	return s.sw.started, s.sw.done
}
