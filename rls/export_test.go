package rls

import (
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/store"
)

// LeaseStats returns the counters of the lease limiter of the running
// leased limit named policy (its descriptor path), for the tests.
func LeaseStats(s *Service, policy string) (lease.Stats, bool) {
	ll, ok := s.live.Set().Lease(policy)
	if !ok {
		return lease.Stats{}, false
	}
	return ll.Stats(), true
}

// StoreOf returns the store s decides on, for the tests.
func StoreOf(s *Service) store.Store { return s.store }
