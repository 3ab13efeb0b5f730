package redisstore

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/internal/livetest"
	fgpolicy "github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// Keys carry over live changes in the scripts as storetest's model says
// (the convert at a key's first request after a change, Apply and ApplyAll),
// on a single node and on the cluster, for every algorithm family.
func TestConversion(t *testing.T) {
	for name, c := range targets(t) {
		for family, versions := range livetest.Versions(t) {
			t.Run(name+"/"+family, func(t *testing.T) {
				clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
				storetest.RunConversion(t, func(t *testing.T) store.Store {
					return testStore(t, c, withClock(clk))
				}, versions, storetest.WithClock(clk))
			})
		}
	}
}

// The live-change scenarios on Redis (single node and cluster),
// through the API, a file reload and a watched file, and random changes
// bounded by the versions that ran.
func TestLiveChanges(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			env := func(t *testing.T) (livetest.Env, *storetest.Clock) {
				clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
				return livetest.Env{Store: testStore(t, c, withClock(clk)), Advance: clk.Advance}, clk
			}
			for _, ap := range livetest.Appliers() {
				t.Run(ap.Name+"/RaiseThenLower", func(t *testing.T) {
					e, _ := env(t)
					livetest.RaiseThenLower(t, e, ap)
				})
				t.Run(ap.Name+"/KeepsTokens", func(t *testing.T) {
					e, _ := env(t)
					livetest.KeepsTokens(t, e, ap)
				})
			}
			t.Run("Plans", func(t *testing.T) {
				e, _ := env(t)
				livetest.Plans(t, e)
			})
			t.Run("RaiseInGroup", func(t *testing.T) {
				e, _ := env(t)
				livetest.RaiseInGroup(t, e)
			})
			for _, f := range livetest.Families() {
				t.Run("Bounded/"+f.Name, func(t *testing.T) {
					e, clk := env(t)
					livetest.Bounded(t, e, func() int64 { return clk.Now().UnixMicro() }, f, 1)
				})
			}
		})
	}
}

// Two OS processes on one Redis (this test binary, re-executed), each with
// its own client, store and Live on pro 100/s, 4 goroutines each taking
// from one key drained at the start; one is reloaded to pro 200/s 500 ms
// before the other. Together they never admit more than the larger config
// allows (200/s from the start, and its burst of 200 over any interval),
// and the key is not starved while they disagree (at least the smaller
// config's rate, less 10%). On the server's time, as in production.
func TestTwoProcessesReloadedApart(t *testing.T) {
	if os.Getenv(envChild) == "reload" {
		reloadChild(t)
		return
	}
	for name, addrs := range map[string][]string{"single": {singleAddr}, "cluster": clusterAddrs} {
		t.Run(name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			dir := t.TempDir()
			type child struct {
				cmd  *exec.Cmd
				in   io.WriteCloser
				out  string
				done chan error
			}
			ready := make(chan int, 2)
			var children []*child
			for i := range 2 {
				c := &child{out: filepath.Join(dir, fmt.Sprintf("admitted-%d", i)), done: make(chan error, 1)}
				c.cmd = exec.Command(os.Args[0], "-test.run=^TestTwoProcessesReloadedApart$", "-test.count=1")
				c.cmd.Env = append(os.Environ(),
					envChild+"=reload",
					"FLOODGATE_RELOAD_ADDRS="+strings.Join(addrs, ","),
					"FLOODGATE_RELOAD_PREFIX="+prefix,
					"FLOODGATE_RELOAD_AT="+strconv.Itoa(500*(i+1)), // ms after the start
					"FLOODGATE_RELOAD_OUT="+c.out,
				)
				stdout, err := c.cmd.StdoutPipe()
				require.NoError(t, err)
				c.in, err = c.cmd.StdinPipe()
				require.NoError(t, err)
				c.cmd.Stderr = os.Stderr
				require.NoError(t, c.cmd.Start())
				t.Cleanup(func() { _ = c.cmd.Process.Kill() })
				go func() {
					sc := bufio.NewScanner(stdout)
					for sc.Scan() {
						if sc.Text() == "READY" {
							ready <- i
						}
					}
					c.done <- c.cmd.Wait()
				}()
				children = append(children, c)
			}
			for range children {
				select {
				case <-ready:
				case <-time.After(30 * time.Second):
					t.Fatal("children did not get ready")
				}
			}
			// Both are connected and running pro 100/s: drain the key, then
			// start them together.
			s, err := New(newClient(t, addrs...), WithPrefix(prefix), WithTimeout(5*time.Second))
			require.NoError(t, err)
			cfg, err := fgpolicy.Parse("limits.yaml", []byte(livetest.Pro(100)))
			require.NoError(t, err)
			live, err := fgpolicy.NewLive(cfg, s, livetest.Secret)
			require.NoError(t, err)
			ctx := context.Background()
			for {
				d, err := live.Take(ctx, "k", 1)
				require.NoError(t, err)
				if !d.Allowed {
					break
				}
			}
			start := time.Now()
			for _, c := range children {
				_, err := fmt.Fprintln(c.in, start.UnixNano())
				require.NoError(t, err)
				require.NoError(t, c.in.Close())
			}
			type admission struct{ sent, got int64 }
			var admitted []admission
			for i, c := range children {
				select {
				case err := <-c.done:
					require.NoError(t, err, "child %d", i)
				case <-time.After(60 * time.Second):
					t.Fatalf("child %d did not finish", i)
				}
				b, err := os.ReadFile(c.out)
				require.NoError(t, err)
				for _, line := range strings.Fields(string(b)) {
					var a admission
					_, err := fmt.Sscanf(line, "%d,%d", &a.sent, &a.got)
					require.NoError(t, err)
					admitted = append(admitted, a)
				}
			}
			end := time.Now()
			slices.SortFunc(admitted, func(a, b admission) int { return cmp.Compare(a.sent, b.sent) })
			const interval = 5 * time.Millisecond // 200/s
			total := len(admitted)
			if limit := int(end.Sub(start)/interval) + 1; total > limit {
				t.Fatalf("%d admitted in %v from a drained key, above the larger config's %d", total, end.Sub(start), limit)
			}
			if floor := int(2*time.Second/(10*time.Millisecond)) * 9 / 10; total < floor {
				t.Fatalf("%d admitted in 2 s, below the smaller config's rate less 10%% (%d): starved while the processes disagree", total, floor)
			}
			// Over any interval: the decisions of admissions i..j were made
			// between i's send and the latest answer among them.
			for i := range admitted {
				last := int64(0)
				for j := i; j < len(admitted); j++ {
					last = max(last, admitted[j].got)
					if bound := 200 + int(time.Duration(last-admitted[i].sent)/interval); j-i+1 > bound {
						t.Fatalf("%d admitted within %v, above the larger config's %d", j-i+1, time.Duration(last-admitted[i].sent), bound)
					}
				}
			}
			t.Logf("%d admitted over 2 s by two processes", total)
		})
	}
}

// reloadChild is one process of TestTwoProcessesReloadedApart: it runs pro
// 100/s, waits for the start time on stdin, takes from "k" with 4
// goroutines for 2 s, reloads to pro 200/s at its offset, and writes
// "sent,got" (Unix ns) of every admission to its output file.
func reloadChild(t *testing.T) {
	addrs := strings.Split(os.Getenv("FLOODGATE_RELOAD_ADDRS"), ",")
	s, err := New(newClient(t, addrs...), WithPrefix(os.Getenv("FLOODGATE_RELOAD_PREFIX")), WithTimeout(5*time.Second))
	require.NoError(t, err)
	cfg, err := fgpolicy.Parse("limits.yaml", []byte(livetest.Pro(100)))
	require.NoError(t, err)
	live, err := fgpolicy.NewLive(cfg, s, livetest.Secret)
	require.NoError(t, err)
	ms, err := strconv.Atoi(os.Getenv("FLOODGATE_RELOAD_AT"))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = live.Take(ctx, "warm-up", 1) // load the script, open the connections
	require.NoError(t, err)
	fmt.Println("READY")
	var ns int64
	_, err = fmt.Fscanln(os.Stdin, &ns)
	require.NoError(t, err)
	start := time.Unix(0, ns)
	end := start.Add(2 * time.Second)
	var mu sync.Mutex
	var out strings.Builder
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(end) {
				sent := time.Now()
				d, err := live.Take(ctx, "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					got := time.Now()
					mu.Lock()
					fmt.Fprintf(&out, "%d,%d\n", sent.UnixNano(), got.UnixNano())
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(time.Until(start.Add(time.Duration(ms) * time.Millisecond)))
	cfg, err = fgpolicy.Parse("limits.yaml", []byte(livetest.Pro(200)))
	require.NoError(t, err)
	_, err = live.Update(cfg, "reload")
	require.NoError(t, err)
	wg.Wait()
	require.NoError(t, os.WriteFile(os.Getenv("FLOODGATE_RELOAD_OUT"), []byte(out.String()), 0o644))
}

// A key's value holds the parameters its state was written with, after
// "|"; a value without them (written by an earlier floodgate) is taken as
// written with the caller's parameters, and rewritten with them.
func TestValueKeepsItsParameters(t *testing.T) {
	c := newClient(t, singleAddr)
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := testStore(t, c, withClock(clk))
	versions := livetest.Versions(t)
	ctx := context.Background()
	for _, family := range []string{"token-bucket", "leaky-bucket", "sliding-log"} {
		alg := versions[family][0]
		_, err := s.Apply(ctx, family, alg, 1)
		require.NoError(t, err)
		v, err := c.Do(ctx, c.B().Get().Key(s.keyOf(family, alg)).Build()).ToString()
		require.NoError(t, err)
		state, params, ok := strings.Cut(v, "|")
		require.True(t, ok, "value %q", v)
		require.Equal(t, stateParams(alg.Spec()), params)

		// The same state without its parameters decides the same.
		want, err := s.Apply(ctx, family, alg, 0)
		require.NoError(t, err)
		require.NoError(t, c.Do(ctx, c.B().Set().Key(s.keyOf(family, alg)).Value(state).Px(time.Minute).Build()).Error())
		got, err := s.Apply(ctx, family, alg, 0)
		require.NoError(t, err)
		require.Equal(t, want, got, "%s: a value without parameters", family)
		v, err = c.Do(ctx, c.B().Get().Key(s.keyOf(family, alg)).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, state+"|"+params, v, "%s: rewritten with its parameters", family)
	}
}
