package priority_test

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/priority"
)

// Three classes share a capacity of 20 requests in flight: best-effort is
// shed at 85% (17 in flight), standard at 95% (19), critical at 100%.
func Example() {
	twenty, _ := adaptive.NewConstant(20)
	capacity, _ := adaptive.NewGate(twenty)
	p, err := priority.NewShedder(capacity) // the default classes
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	admitted := func(c priority.Class) int {
		n := 0
		for {
			if _, err := p.Acquire(ctx, c); err != nil {
				return n
			}
			n++
		}
	}
	fmt.Println("best-effort:", admitted(priority.BestEffort))
	fmt.Println("standard:", admitted(priority.Standard))
	fmt.Println("critical:", admitted(priority.Critical))
	for _, s := range p.Stats() {
		fmt.Printf("%s admitted %d shed %d\n", s.Name, s.Admitted, s.Shed)
	}
	// Output:
	// best-effort: 17
	// standard: 2
	// critical: 1
	// best-effort admitted 17 shed 1
	// standard admitted 2 shed 1
	// critical admitted 1 shed 1
}

// The capacity can be an adaptive gate; more than three classes, with
// names and thresholds of your own, listed from the least important up.
func ExampleNewShedder() {
	alg, _ := adaptive.NewGradient2(adaptive.Gradient2Config{})
	capacity, _ := adaptive.NewGate(alg)
	p, err := priority.NewShedder(capacity,
		priority.ClassConfig{Name: "analytics", ShedAt: 0.5},
		priority.ClassConfig{Name: "recommendations", ShedAt: 0.7},
		priority.ClassConfig{Name: "browse", ShedAt: 0.9},
		priority.ClassConfig{Name: "checkout", ShedAt: 1},
	)
	if err != nil {
		panic(err)
	}
	c, _ := p.Class("analytics")
	tok, err := p.Acquire(context.Background(), c)
	st := capacity.Stats()
	fmt.Println(err, st.InFlight, "of", st.Limit)
	tok.Success()
	// Output:
	// <nil> 1 of 20
}
