package redisstore

// Shared implements [github.com/floodgate-go/floodgate/store.Shared]: the
// state in Redis is shared by every process that uses it, so constructors
// that hash credentials into keys require one secret across the fleet.
func (s *Store) Shared() bool { return true }
