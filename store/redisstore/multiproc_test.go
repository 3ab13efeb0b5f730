package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
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
// x 32 goroutines hammer one key of a 1000/s token bucket (burst 1000: a stall
// of the loaded test machine shorter than 1s loses no token) for 5s.
// Admitted requests must stay within rate x elapsed + burst, and reach 99% of
// it.
const (
	mpProcs      = 4
	mpGoroutines = 32
	mpRate       = 1000
	mpBurst      = 1000
	mpDuration   = 5 * time.Second
)

func TestManyProcessesOneLimit(t *testing.T) {
	if os.Getenv(envChild) == "hammer" {
		hammerChild(t)
		return
	}
	prefix := uniquePrefix(t)
	type result struct {
		admitted, errs int64
		calls, last    int64
		first          int64
		firstRecv      int64
		lastSent       int64
		err            error
	}
	results := make([]result, mpProcs)
	ready := make(chan int, mpProcs)
	var stdins []io.WriteCloser
	var wg sync.WaitGroup
	for i := range mpProcs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestManyProcessesOneLimit$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			envChild+"=hammer",
			envSingle+"="+singleAddr,
			"FLOODGATE_MP_PREFIX="+prefix,
		)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		in, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdins = append(stdins, in)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		wg.Go(func() {
			r := &results[i]
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if sc.Text() == "READY" {
					ready <- i
				}
				if line, ok := strings.CutPrefix(sc.Text(), "HAMMER "); ok {
					_, r.err = fmt.Sscanf(line, "admitted=%d errors=%d calls=%d first=%d last=%d firstrecv=%d lastsent=%d", &r.admitted, &r.errs, &r.calls, &r.first, &r.last, &r.firstRecv, &r.lastSent)
				}
			}
			if err := cmd.Wait(); err != nil && r.err == nil {
				r.err = fmt.Errorf("child %d: %w", i, err)
			}
		})
	}
	// Every child is connected and waiting: start them together.
	for range mpProcs {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			t.Fatal("children did not get ready")
		}
	}
	start := time.Now().Add(20 * time.Millisecond)
	for _, in := range stdins {
		_, err := fmt.Fprintln(in, start.UnixNano())
		require.NoError(t, err)
		in.Close()
	}
	wg.Wait()
	var admitted, errs, calls, last, lastSent int64
	first, firstRecv := int64(1<<63-1), int64(1<<63-1)
	for i, r := range results {
		require.NoError(t, r.err, "child %d", i)
		require.NotZero(t, r.last, "child %d reported nothing", i)
		admitted += r.admitted
		errs += r.errs
		calls += r.calls
		first = min(first, r.first)
		last = max(last, r.last)
		firstRecv = min(firstRecv, r.firstRecv)
		lastSent = max(lastSent, r.lastSent)
	}
	// The server decided every request between the first request sent and
	// the last reply received (the upper bound uses that window), and it
	// decided at least from the first reply received to the last request
	// sent (the 99% lower bound uses that one: the bucket starts full, so
	// the time the first requests take to reach Redis is lost to any
	// limiter).
	outer := time.Duration(last - first)
	inner := time.Duration(lastSent - firstRecv)
	upper := float64(mpRate)*outer.Seconds() + mpBurst
	lower := float64(mpRate)*inner.Seconds() + mpBurst
	t.Logf("%d processes x %d goroutines, %v: %d calls, admitted %d; rate x elapsed + burst = %.0f over %v (%.2f%%), %.0f over %v (%.2f%%); errors %d",
		mpProcs, mpGoroutines, outer.Round(time.Millisecond), calls, admitted,
		upper, outer.Round(time.Millisecond), 100*float64(admitted)/upper,
		lower, inner.Round(time.Millisecond), 100*float64(admitted)/lower, errs)
	require.Zero(t, errs, "calls that could not decide")
	require.LessOrEqual(t, float64(admitted), upper, "more admitted than the limit allows")
	require.GreaterOrEqual(t, float64(admitted), 0.99*lower, "less than 99%% of the limit admitted")
}

// hammerChild is one of the processes of TestManyProcessesOneLimit.
func hammerChild(t *testing.T) {
	c := newClient(t, singleAddr)
	s, err := New(c, WithPrefix(os.Getenv("FLOODGATE_MP_PREFIX")), WithTimeout(5*time.Second))
	require.NoError(t, err)
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(mpRate), Burst: mpBurst})
	require.NoError(t, err)
	// Connected: wait for the start time from the parent.
	require.NoError(t, c.Do(context.Background(), c.B().Ping().Build()).Error())
	fmt.Println("READY")
	var ns int64
	_, err = fmt.Fscanln(os.Stdin, &ns)
	require.NoError(t, err)
	start := time.Unix(0, ns)
	end := start.Add(mpDuration)
	var admitted, errs, calls, last, lastSent atomic.Int64
	var first, firstRecv atomic.Int64
	first.Store(1<<63 - 1)
	firstRecv.Store(1<<63 - 1)
	var wg sync.WaitGroup
	ctx := context.Background()
	time.Sleep(time.Until(start))
	for range mpGoroutines {
		wg.Go(func() {
			for time.Now().Before(end) {
				sent := time.Now().UnixNano()
				minInto(&first, sent)
				maxInto(&lastSent, sent)
				d, err := l.Take(ctx, "shared", 1)
				calls.Add(1)
				now := time.Now().UnixNano()
				minInto(&firstRecv, now)
				maxInto(&last, now)
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
	fmt.Printf("HAMMER admitted=%d errors=%d calls=%d first=%d last=%d firstrecv=%d lastsent=%d\n",
		admitted.Load(), errs.Load(), calls.Load(), first.Load(), last.Load(), firstRecv.Load(), lastSent.Load())
}

func minInto(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v >= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

func maxInto(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}
