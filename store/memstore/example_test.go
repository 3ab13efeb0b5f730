package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// A store bounded to 3 keys in one shard: a fourth key evicts the one
// closest to full, and Stats counts it. The clock is fixed so that the
// output is reproducible.
func Example() {
	now := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(
		memstore.WithClock(floodgate.ClockFunc(func() time.Time { return now })),
		memstore.WithShards(1),
		memstore.WithMaxKeys(3),
	)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 10})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lim.Take(ctx, "a", 1) // full again in 1s: the first to go
	lim.Take(ctx, "b", 5)
	lim.Take(ctx, "c", 5)
	fmt.Printf("%+v\n", s.Stats())
	lim.Take(ctx, "d", 5)
	fmt.Printf("%+v\n", s.Stats())
	d, _ := lim.Peek(ctx, "a")
	fmt.Println("a starts again from", d.Remaining)
	now = now.Add(5 * time.Second) // b, c and d are full again
	s.Sweep()
	fmt.Printf("%+v\n", s.Stats())
	// Output:
	// {Keys:3 MaxKeys:3 Slots:8 Evictions:0 Expired:0 Sweeps:0 Shards:1}
	// {Keys:3 MaxKeys:3 Slots:8 Evictions:1 Expired:0 Sweeps:0 Shards:1}
	// a starts again from 10
	// {Keys:0 MaxKeys:3 Slots:8 Evictions:1 Expired:3 Sweeps:1 Shards:1}
}
