package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/share"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// The grant program's division of a saturated bucket (internal/share's Lua
// twin) decides exactly as its Go step: random claims of four members
// (calm and saturated, withdrawals, reports that expire) at random times,
// on a single node and on the cluster; after every claim the grant, the
// board and the bucket are the same.
func TestShareSameAsGo(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(time.UnixMicro(1_700_000_000_000_000))
			rs := testStore(t, c, withClock(clk))
			lim, err := bucket.NewKeyed(rs, bucket.Config{Name: "share-" + name, Rate: floodgate.PerSecond(1000), Burst: 50})
			require.NoError(t, err)
			alg := lim.Algorithm()
			g := alg.(algo.Granter)
			key := fmt.Sprintf("share-%x", rand.Uint64())
			p, err := rs.prepare(alg)
			require.NoError(t, err)
			bucketKey, boardKey := rs.redisKey(key, p.nsHex), rs.boardKey(key, p.nsHex)
			members := []string{"m1", "m2", "m3", "m4"}
			r := rand.New(rand.NewPCG(21, 1))
			var w int64
			var board string
			ctx := context.Background()
			shared, withdrawn := 0, 0
			for i := range 1500 {
				clk.Set(clk.Now().Add(time.Duration(r.IntN(40_000)) * time.Microsecond))
				now := clk.Now().UnixMicro()
				want := 1 + r.Int64N(50)
				cl := algo.Claim{Want: want, Least: 1 + r.Int64N(want), Member: members[r.IntN(len(members))],
					Demand: r.Int64N(1200), Period: []time.Duration{50 * time.Millisecond, 300 * time.Millisecond}[r.IntN(2)]}
				switch r.IntN(10) {
				case 0:
					cl.Member = ""
				case 1:
					cl.Demand = 0 // a withdrawal
				case 2, 3, 4:
					cl.Demand = r.Int64N(300) // mostly calm
				}
				var want0 algo.Grant
				w, board, want0, err = share.Divide(g, w, now, board, cl)
				require.NoError(t, err)
				got, err := rs.Grant(ctx, key, alg, cl)
				require.NoError(t, err)
				require.Equal(t, want0, got, "claim %d %+v", i, cl)
				if got.Shared {
					shared++
				}
				if cl.Member != "" && cl.Demand == 0 {
					withdrawn++
				}
				require.Equal(t, board, getOr(t, c, boardKey), "board after claim %d", i)
				v := getOr(t, c, bucketKey)
				if w <= now {
					// The store drops a full bucket's word; so does the
					// Go side, as the next load would.
					require.Empty(t, v, "claim %d: the bucket is full in Go", i)
					w = 0
				} else {
					tat, err := strconv.ParseInt(strings.SplitN(v, "|", 2)[0], 10, 64)
					require.NoError(t, err, "bucket value %q", v)
					require.Equal(t, w, tat, "bucket after claim %d", i)
				}
			}
			t.Logf("%d shared grants, %d withdrawals", shared, withdrawn)
			require.Greater(t, shared, 100)
			require.Greater(t, withdrawn, 50)
		})
	}
}

func getOr(t *testing.T, c rueidis.Client, key string) string {
	t.Helper()
	v, err := c.Do(context.Background(), c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return ""
	}
	require.NoError(t, err)
	return v
}
