package monotime_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/monotime"
)

// Nanotime never goes backwards and stays within a second of the wall clock.
func TestNanotime(t *testing.T) {
	prev := monotime.Nanotime()
	for range 10000 {
		now := monotime.Nanotime()
		if now < prev {
			t.Fatalf("Nanotime went backwards: %d after %d", now, prev)
		}
		prev = now
	}
	if d := time.Duration(monotime.Nanotime() - time.Now().UnixNano()); d > time.Second || d < -time.Second {
		t.Fatalf("Nanotime is %v away from the wall clock", d)
	}
}

// Clock reads Nanotime: never backwards, within a second of the wall clock.
func TestClock(t *testing.T) {
	var c monotime.Clock
	prev := c.Now()
	for range 10000 {
		now := c.Now()
		if now.Before(prev) {
			t.Fatalf("Clock went backwards: %v after %v", now, prev)
		}
		prev = now
	}
	if d := time.Since(c.Now()); d > time.Second || d < -time.Second {
		t.Fatalf("Clock is %v away from the wall clock", d)
	}
}
