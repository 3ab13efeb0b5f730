package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
)

// slots is a fixed concurrency limit recording how slots were released.
type slots struct {
	mu       sync.Mutex
	inflight int
	max      int
	results  []bool
}

func (s *slots) Acquire(context.Context) (func(bool), bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight >= s.max {
		return nil, false, nil
	}
	s.inflight++
	var once sync.Once
	return func(ok bool) {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.inflight--
			s.results = append(s.results, ok)
		})
	}, true, nil
}

func TestShedOverRealServer(t *testing.T) {
	acq := &slots{max: 1}
	obs := &counter{}
	mw, err := Shed(acq, WithObserver(obs), WithShedRetryAfter(1500*time.Millisecond), WithProblemDetails(true),
		WithHeaders(middleware.HeadersDiagnostic))
	if err != nil {
		t.Fatal(err)
	}
	entered, unblock := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-unblock
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	srv := serve(t, mw(mux))
	c := clientFrom(t, "127.0.0.1")

	done := make(chan result)
	go func() {
		req, _ := http.NewRequest("GET", srv.URL+"/slow", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		resp.Body.Close()
		done <- result{status: resp.StatusCode}
	}()
	<-entered
	res := do(t, c, "GET", srv.URL+"/fail", nil)
	if res.status != 503 || res.header.Get("Retry-After") != "2" || res.header.Get("Cache-Control") != "no-store" ||
		res.header.Get("Content-Type") != "application/problem+json" || res.header.Get("X-RateLimit-Reason") != "overloaded" {
		t.Fatalf("shed: %d %v %q", res.status, res.header, res.body)
	}
	close(unblock)
	if r := <-done; r.status != http.StatusNoContent {
		t.Fatalf("slow request: %d", r.status)
	}
	if res := do(t, c, "GET", srv.URL+"/fail", nil); res.status != 500 {
		t.Fatalf("fail: %d", res.status)
	}
	acq.mu.Lock()
	defer acq.mu.Unlock()
	if len(acq.results) != 2 || !acq.results[0] || acq.results[1] || acq.inflight != 0 {
		t.Fatalf("releases %v, in flight %d", acq.results, acq.inflight)
	}
	if obs.get(floodgate.OutcomeShed) != 1 || obs.get(floodgate.OutcomeAllowed) != 2 {
		t.Fatalf("observed %v", obs.counts)
	}
}

func TestShedModes(t *testing.T) {
	full := &slots{max: 0}
	obs := &counter{}
	h := &okHandler{}
	dry, _ := Shed(full, WithDryRun(true), WithObserver(obs))
	w := httptest.NewRecorder()
	dry(h).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 200 || obs.get(floodgate.OutcomeWouldDeny) != 1 {
		t.Fatalf("dry run: %d %v", w.Code, obs.counts)
	}

	boom := errors.New("down")
	failing := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) { return nil, false, boom })
	panicking := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) { panic("bug") })
	for _, a := range []middleware.Acquirer{failing, panicking} {
		open, _ := Shed(a, WithObserver(obs))
		closed, _ := Shed(a, WithObserver(obs), WithFailMode(middleware.FailClosed))
		w = httptest.NewRecorder()
		open(h).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 200 {
			t.Fatalf("fail open: %d", w.Code)
		}
		w = httptest.NewRecorder()
		closed(h).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 503 || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("fail closed: %d", w.Code)
		}
	}
	if obs.get(floodgate.OutcomeErrorOpen) != 2 || obs.get(floodgate.OutcomeErrorClosed) != 2 {
		t.Fatalf("observed %v", obs.counts)
	}

	// A handler that panics releases its slot as a failure; the panic goes on
	// to net/http.
	acq := &slots{max: 1}
	mw, _ := Shed(acq)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("handler panic swallowed")
			}
		}()
		mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") })).
			ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	if acq.inflight != 0 || len(acq.results) != 1 || acq.results[0] {
		t.Fatalf("after a handler panic: in flight %d, releases %v", acq.inflight, acq.results)
	}

	// Flush goes through the status recorder.
	w = httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
	})).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if !w.Flushed || !acq.results[1] {
		t.Fatalf("flushed %v, releases %v", w.Flushed, acq.results)
	}
}
