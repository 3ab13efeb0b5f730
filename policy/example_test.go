package policy_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// Plans and an override from a config, and a live raise that keeps a
// drained key drained.
func Example() {
	cfg, err := policy.Parse("limits.yaml", []byte(`
default_plan: free
policies:
  - {name: free, rate: 2/m}
  - {name: pro, rate: 5/m}
overrides:
  key_pro_1: pro
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0)) // stands still
	s, _ := memstore.New(memstore.WithClock(clock))
	defer s.Close()
	live, err := policy.NewLive(cfg, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	count := func(key string, n int) (ok int) {
		for range n {
			if d, _ := live.Take(ctx, key, 1); d.Allowed {
				ok++
			}
		}
		return ok
	}
	fmt.Println("free key:", count("key_someone", 5), "of 5")
	fmt.Println("pro key:", count("key_pro_1", 8), "of 8")

	cfg.Policies[1].Rate.N = 10 // pro: 5/m -> 10/m, live
	change, _ := live.Update(cfg, "api")
	fmt.Println("v", change.Version, change.Details)
	fmt.Println("pro key just after:", count("key_pro_1", 3), "of 3")
	clock.Advance(12 * time.Second)
	fmt.Println("pro key 12 s later:", count("key_pro_1", 3), "of 3")

	_, err = policy.Parse("limits.yaml", []byte("policies:\n  - {name: free, rate: -1/m}\n"))
	fmt.Println(err)
	// Output:
	// free key: 2 of 5
	// pro key: 5 of 8
	// v 2 [pro: token-bucket 5/m burst 5 -> token-bucket 10/m burst 10]
	// pro key just after: 0 of 3
	// pro key 12 s later: 2 of 3
	// limits.yaml:2: rate "-1/m" is negative
}
