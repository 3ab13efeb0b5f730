package storetest_test

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/store/storetest"
)

// The suite's manual clock stands still until advanced; pass it to the store
// under test (memstore.WithClock(clk)) and to Run (storetest.WithClock(clk)).
func ExampleClock() {
	clk := storetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fmt.Println(clk.Now().UTC().Format(time.RFC3339Nano))
	clk.Advance(1500 * time.Millisecond)
	fmt.Println(clk.Now().UTC().Format(time.RFC3339Nano))
	clk.Advance(-time.Hour) // a clock jump backwards
	fmt.Println(clk.Now().UTC().Format(time.RFC3339Nano))
	// Output:
	// 2026-01-01T00:00:00Z
	// 2026-01-01T00:00:01.5Z
	// 2025-12-31T23:00:01.5Z
}
