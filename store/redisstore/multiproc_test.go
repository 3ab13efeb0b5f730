package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
)

// Many processes, one limit: 4 OS processes (this test binary, re-executed)
// x 32 goroutines hammer one key of a 2000/s token bucket (burst 1000: a stall of the loaded test machine shorter than 0.5s loses no token) for 5s.
// Admitted requests must stay within rate x elapsed + burst, and reach 99% of
// it.
const (
	mpProcs      = 4
	mpGoroutines = 32
	mpRate       = 2000
	mpBurst      = 1000
	mpDuration   = 5 * time.Second
)

func TestManyProcessesOneLimit(t *testing.T) {
	if os.Getenv(envChild) == "hammer" {
		hammerChild(t)
		return
	}
	prefix := uniquePrefix(t)
	start := time.Now().Add(2 * time.Second) // time for the children to start
	type result struct {
		admitted, errs int64
		last           int64
		err            error
	}
	results := make([]result, mpProcs)
	var wg sync.WaitGroup
	for i := range mpProcs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestManyProcessesOneLimit$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			envChild+"=hammer",
			envSingle+"="+singleAddr,
			"FLOODGATE_MP_PREFIX="+prefix,
			"FLOODGATE_MP_START="+strconv.FormatInt(start.UnixNano(), 10),
		)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		wg.Go(func() {
			r := &results[i]
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if line, ok := strings.CutPrefix(sc.Text(), "HAMMER "); ok {
					_, r.err = fmt.Sscanf(line, "admitted=%d errors=%d last=%d", &r.admitted, &r.errs, &r.last)
				}
			}
			if err := cmd.Wait(); err != nil && r.err == nil {
				r.err = fmt.Errorf("child %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	var admitted, errs, last int64
	for i, r := range results {
		require.NoError(t, r.err, "child %d", i)
		require.NotZero(t, r.last, "child %d reported nothing", i)
		admitted += r.admitted
		errs += r.errs
		last = max(last, r.last)
	}
	elapsed := time.Duration(last - start.UnixNano())
	bound := float64(mpRate)*elapsed.Seconds() + mpBurst
	t.Logf("%d processes x %d goroutines, %v: admitted %d, bound rate x elapsed + burst = %.0f (%.2f%%), errors %d",
		mpProcs, mpGoroutines, elapsed.Round(time.Millisecond), admitted, bound, 100*float64(admitted)/bound, errs)
	require.Zero(t, errs, "calls that could not decide")
	require.LessOrEqual(t, float64(admitted), bound, "more admitted than the limit allows")
	require.GreaterOrEqual(t, float64(admitted), 0.99*bound, "less than 99%% of the limit admitted")
}

// hammerChild is one of the processes of TestManyProcessesOneLimit.
func hammerChild(t *testing.T) {
	ns, err := strconv.ParseInt(os.Getenv("FLOODGATE_MP_START"), 10, 64)
	require.NoError(t, err)
	start := time.Unix(0, ns)
	end := start.Add(mpDuration)
	c := newClient(t, singleAddr)
	s, err := New(c, WithPrefix(os.Getenv("FLOODGATE_MP_PREFIX")), WithTimeout(5*time.Second))
	require.NoError(t, err)
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(mpRate), Burst: mpBurst})
	require.NoError(t, err)
	var admitted, errs, last atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	time.Sleep(time.Until(start))
	for range mpGoroutines {
		wg.Go(func() {
			for time.Now().Before(end) {
				d, err := l.Take(ctx, "shared", 1)
				now := time.Now().UnixNano()
				for {
					old := last.Load()
					if now <= old || last.CompareAndSwap(old, now) {
						break
					}
				}
				switch {
				case err != nil:
					errs.Add(1)
				case d.Allowed:
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("HAMMER admitted=%d errors=%d last=%d\n", admitted.Load(), errs.Load(), last.Load())
}
