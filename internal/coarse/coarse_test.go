package coarse

import (
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/monotime"
)

// TestReadings checks the contract: a reading is never ahead of
// monotime.Nanotime, never goes backwards, and follows the clock.
func TestReadings(t *testing.T) {
	c := Acquire(time.Millisecond)
	defer c.Release()
	first := c.Micros()
	if now := monotime.Nanotime() / 1000; first > now || first == 0 {
		t.Fatalf("first reading %d, clock %d: want 0 < reading <= clock", first, now)
	}
	prev := first
	deadline := time.Now().Add(5 * time.Second)
	for prev-first < 10_000 { // 10ms of progress
		if time.Now().After(deadline) {
			t.Fatalf("the reading moved %dus in 5s", prev-first)
		}
		got := c.Micros()
		if now := monotime.Nanotime() / 1000; got > now {
			t.Fatalf("reading %d ahead of the clock %d", got, now)
		}
		if got < prev {
			t.Fatalf("reading went back from %d to %d", prev, got)
		}
		prev = got
		time.Sleep(100 * time.Microsecond)
	}
}

// TestShared checks that one resolution is one clock, that its goroutine
// runs while someone holds it and stops at the last release, and that a
// clock acquired again restarts from the time now.
func TestShared(t *testing.T) {
	const res = 3 * time.Millisecond // a resolution no other test holds
	a, b := Acquire(res), Acquire(res)
	if a != b {
		t.Fatal("two clocks for one resolution")
	}
	if a.Resolution() != res {
		t.Fatalf("resolution %v, want %v", a.Resolution(), res)
	}
	a.Release()
	if !b.Running() {
		t.Fatal("the goroutine stopped while a user holds the clock")
	}
	b.Release()
	if b.Running() {
		t.Fatal("the goroutine runs after the last release")
	}
	stale := b.Micros()
	time.Sleep(5 * time.Millisecond)
	c := Acquire(res)
	defer c.Release()
	if c.Micros() < stale+5000 {
		t.Fatalf("reacquired clock reads %d, want >= %d (refreshed at Acquire)", c.Micros(), stale+5000)
	}
}

// TestConcurrent acquires, reads and releases from many goroutines (run
// with -race).
func TestConcurrent(t *testing.T) {
	const res = 2 * time.Millisecond
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				c := Acquire(res)
				prev := c.Micros()
				for range 10 {
					if got := c.Micros(); got < prev {
						t.Errorf("reading went back from %d to %d", prev, got)
					}
				}
				c.Release()
			}
		})
	}
	wg.Wait()
	c := Acquire(res)
	defer c.Release()
	if c.users != 1 {
		t.Fatalf("%d users after every release but one", c.users)
	}
}
