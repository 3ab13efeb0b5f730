package slogobserver_test

import (
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observer/slogobserver"
)

// With a handler at Info, allowed decisions (Debug) are skipped and the
// others are logged; failures are folded.
func Example() {
	handler := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a stable output for the example
			}
			return a
		},
	})
	obs, err := slogobserver.New(slog.New(handler))
	if err != nil {
		panic(err)
	}
	obs.Observe(floodgate.Event{Policy: "per-peer", Route: "/search", Outcome: floodgate.OutcomeAllowed,
		Decision: floodgate.Decision{Allowed: true, Limit: 5, Remaining: 4}, Latency: 800 * time.Nanosecond})
	obs.Observe(floodgate.Event{Policy: "per-peer", Route: "/search", Outcome: floodgate.OutcomeDenied,
		Decision: floodgate.Decision{Limit: 5, RetryAfter: 200 * time.Millisecond}, Latency: 900 * time.Nanosecond})
	// The store is down: the first failure is written, the next ones within
	// the fold interval (10 s by default) are counted.
	for range 3 {
		obs.Observe(floodgate.Event{Policy: "shared", Outcome: floodgate.OutcomeErrorOpen,
			Err: errors.New("store unavailable"), Latency: 3 * time.Millisecond})
	}
	// Before exiting, write what is still counted.
	obs.Flush()
	// Output:
	// level=INFO msg="floodgate decision" policy=per-peer outcome=denied route=/search latency=900ns limit=5 remaining=0 retry_after=200ms
	// level=WARN msg="floodgate decision" policy=shared outcome=error_open latency=3ms error="store unavailable"
	// level=WARN msg="floodgate failures folded" policy=shared outcome=error_open folded=2
}
