package memstore

// SweeperState reports whether s's background sweeper goroutine has
// started, and returns the channel closed when it returns.
func SweeperState(s *Store) (started bool, done <-chan struct{}) {
	s.sw.mu.Lock()
	defer s.sw.mu.Unlock()
	return s.sw.started, s.sw.done
}

// CoarseRunning reports whether the coarse clock s reads runs its
// goroutine (false without WithCoarseClock).
func CoarseRunning(s *Store) bool { return s.coarse != nil && s.coarse.Running() }

// CoarseClock returns the coarse clock s reads, or nil.
func CoarseClock(s *Store) interface{ Running() bool } {
	if s.coarse == nil {
		return nil
	}
	return s.coarse
}
