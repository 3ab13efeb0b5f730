package window

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

func TestConfigInvalid(t *testing.T) {
	ctors := map[string]func(Config) (algo.Algorithm, error){
		"fixed":   Config.FixedAlgorithm,
		"log":     Config.SlidingLogAlgorithm,
		"counter": Config.SlidingCounterAlgorithm,
	}
	cases := []struct {
		name string
		c    Config
		bad  []string // the algorithms that must refuse it
		msg  string
	}{
		{"zero", Config{}, []string{"fixed", "log", "counter"}, "limit must be >= 1"},
		{"negative limit", Config{Limit: -1, Window: time.Second}, []string{"fixed", "log", "counter"}, "limit must be >= 1"},
		{"huge limit", Config{Limit: maxLimit + 1, Window: time.Second}, []string{"fixed", "log", "counter"}, "above the maximum"},
		{"zero window", Config{Limit: 1}, []string{"fixed", "log", "counter"}, "window must be > 0"},
		{"negative window", Config{Limit: 1, Window: -time.Second}, []string{"fixed", "log", "counter"}, "window must be > 0"},
		{"sub-microsecond", Config{Limit: 1, Window: time.Second + 1}, []string{"fixed", "log", "counter"}, "whole number of microseconds"},
		{"nanosecond", Config{Limit: 1, Window: time.Nanosecond}, []string{"fixed", "log", "counter"}, "whole number of microseconds"},
		{"window too long", Config{Limit: 1, Window: maxWindow + time.Microsecond}, []string{"fixed", "log", "counter"}, "above the maximum"},
		{"log too long", Config{Limit: maxLogLimit + 1, Window: time.Second}, []string{"log"}, "sliding log limit"},
		{"counter overflows", Config{Limit: 1 << 30, Window: time.Hour}, []string{"log", "counter"}, "limit"},
		{"counter overflows only", Config{Limit: maxCounterProduct/us(time.Hour) + 1, Window: time.Hour}, []string{"log", "counter"}, "limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for name, ctor := range ctors {
				_, err := ctor(c.c)
				mustFail := strings.Contains(strings.Join(c.bad, ","), name)
				if !mustFail {
					if err != nil {
						t.Fatalf("%s refused %+v: %v", name, c.c, err)
					}
					continue
				}
				if !errors.Is(err, floodgate.ErrInvalidConfig) || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("%s(%+v) error %v, want ErrInvalidConfig with %q", name, c.c, err, c.msg)
				}
			}
		})
	}
	// The limits themselves are accepted.
	for _, c := range []struct {
		name string
		c    Config
	}{
		{"fixed", Config{Limit: maxLimit, Window: maxWindow}},
		{"log", Config{Limit: maxLogLimit, Window: maxWindow}},
		{"counter", Config{Limit: 4, Window: maxWindow}},
		{"counter", Config{Limit: maxCounterProduct / us(time.Hour), Window: time.Hour}},
		{"fixed", Config{Limit: 1, Window: time.Microsecond}},
		{"log", Config{Limit: 1, Window: time.Microsecond}},
		{"counter", Config{Limit: 1, Window: time.Microsecond}},
	} {
		if _, err := ctors[c.name](c.c); err != nil {
			t.Errorf("%s refused %+v: %v", c.name, c.c, err)
		}
	}
}

func TestNewLimiters(t *testing.T) {
	ctx := context.Background()
	c := Config{Limit: 2, Window: time.Second}
	for name, ctor := range map[string]func(store.Store, Config) (*store.Limiter, error){
		"fixed": NewFixed, "log": NewSlidingLog, "counter": NewSlidingCounter,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ctor(newMapStore(t0), Config{}); !errors.Is(err, floodgate.ErrInvalidConfig) {
				t.Fatalf("zero config: %v", err)
			}
			if _, err := ctor(nil, c); !errors.Is(err, floodgate.ErrInvalidConfig) {
				t.Fatalf("nil store: %v", err)
			}
			st := newMapStore(t0)
			l, err := ctor(st, c)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{0, -1, 3} {
				if _, err := l.Take(ctx, "k", n); !errors.Is(err, floodgate.ErrInvalidCost) {
					t.Fatalf("Take(%d): %v, want ErrInvalidCost", n, err)
				}
				if err := l.Refund(ctx, "k", n); !errors.Is(err, floodgate.ErrInvalidCost) {
					t.Fatalf("Refund(%d): %v, want ErrInvalidCost", n, err)
				}
			}
			d, err := l.Take(ctx, "k", 2)
			if err != nil || !d.Allowed || d.Remaining != 0 || d.Limit != 2 {
				t.Fatalf("Take(2) = %+v, %v", d, err)
			}
			if d, _ := l.Take(ctx, "k", 1); d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("third unit admitted: %+v", d)
			}
			if d, _ := l.Take(ctx, "other", 1); !d.Allowed {
				t.Fatalf("keys are not independent: %+v", d)
			}
			if err := l.Refund(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
			if d, _ := l.Peek(ctx, "k"); !d.Allowed || d.Remaining != 1 {
				t.Fatalf("after refund: %+v", d)
			}
			// A fresh key after the store dropped a full state.
			st.set(t0 + 10*second)
			if d, _ := l.Peek(ctx, "k"); d.Remaining != 2 || d.ResetAfter != 0 {
				t.Fatalf("after 10 windows: %+v", d)
			}
			if _, kept := st.m["k"]; kept {
				t.Fatal("store kept a full state")
			}
		})
	}
}

func TestSpecs(t *testing.T) {
	a := algs(t, Config{Limit: 5, Window: time.Minute})
	b := algs(t, Config{Limit: 6, Window: time.Minute})
	seen := map[uint64]string{}
	for _, set := range []map[string]uint64{nsOf(a), nsOf(b)} {
		for name, ns := range set {
			if other, dup := seen[ns]; dup {
				t.Fatalf("%s shares namespace with %s", name, other)
			}
			seen[ns] = name
		}
	}
	words := map[string]int{"fixed": 2, "log": 1, "counter": 4}
	for name, alg := range a {
		sp := alg.Spec()
		if sp.Words != words[name] || sp.Lua.Source == "" || len(sp.Lua.Params) != 2 || sp.Lua.Params[0] != 5 || sp.Lua.Params[1] != 60_000_000 {
			t.Fatalf("%s: spec %+v", name, sp)
		}
		if (sp.MaxLog > 0) != (name == "log") || (name == "log" && sp.MaxLog != 5) {
			t.Fatalf("%s: MaxLog %d", name, sp.MaxLog)
		}
	}
}

func nsOf(m map[string]algo.Algorithm) map[string]uint64 {
	out := map[string]uint64{}
	for name, a := range m {
		out[name+"/"+a.Spec().Name+string(rune(a.Spec().Lua.Params[0]))] = a.Spec().Namespace
	}
	return out
}
