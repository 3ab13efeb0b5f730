package policy_test

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
)

// String is the policy on one line; a bucket's rate is written as config
// files write it (FormatRate), a window's as a limit per duration.
func ExamplePolicy_String() {
	fmt.Println(policy.Policy{Name: "pro", Rate: floodgate.PerSecond(100)})
	fmt.Println(policy.Policy{Name: "batch", Rate: floodgate.Rate{N: 5, Per: 30 * time.Second}, Burst: 10})
	fmt.Println(policy.Policy{Name: "edge", Algorithm: policy.LeakyBucket, Rate: floodgate.PerMinute(30), Burst: 5})
	fmt.Println(policy.Policy{Name: "daily", Algorithm: policy.FixedWindow, Limit: 1000, Window: time.Hour, DryRun: true})
	// Output:
	// pro: token-bucket 100/s burst 100
	// batch: token-bucket 5/30s burst 10
	// edge: leaky-bucket 30/m burst 5
	// daily: fixed-window 1000 per 1h0m0s (dry run)
}
