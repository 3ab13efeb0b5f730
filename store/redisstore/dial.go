package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
)

// The back-off of Dial between two failed attempts to make its client: the
// first retry goes minDialWait after the first failure, each failure
// doubles the wait, up to maxDialWait. maxDialWait bounds how long after
// Redis answers the store decides on it (plus one connection's handshake).
const (
	minDialWait = 10 * time.Millisecond
	maxDialWait = 500 * time.Millisecond
)

// errNotConnected is wrapped by the error of every call made before the
// client of a [Dial] store is there.
var errNotConnected = errors.New("redisstore: not connected to Redis yet")

// Dial returns a Store on a client that it makes from opt, the way
// rueidis.NewClient does, and owns: [Store.Close] closes it. Unlike
// rueidis.NewClient, Dial does not fail when Redis is down: it returns a
// Store whose every call goes to its [FailurePolicy], with a cause
// wrapping [floodgate.ErrStoreUnavailable] and the last connection error,
// while it tries again in the background, 10ms after the first failure,
// then with a back-off doubling up to 500ms, until a client is made. The
// store then decides on Redis: within about 500ms of Redis answering, plus
// a connection's handshake. Each attempt may wait up to opt.Dialer.Timeout
// (rueidis' default: 5s) for a server that does not answer at all (a
// partition): set it lower for a faster start after one.
//
// Dial waits for its first attempt up to the per-decision timeout
// ([WithTimeout]): when Redis is up, the store decides on it from its first
// call. The options are those of [New]. Errors wrap
// [floodgate.ErrInvalidConfig]: an invalid Option, an opt without
// InitAddress, or an opt that rueidis refuses before it dials (conflicting
// options). A service, its middleware and its limiters can thus start while
// Redis is down.
func Dial(opt rueidis.ClientOption, opts ...Option) (*Store, error) {
	if len(opt.InitAddress) == 0 {
		return nil, fmt.Errorf("%w: redisstore: Dial without an address (InitAddress)", floodgate.ErrInvalidConfig)
	}
	c, err := configure(opts)
	if err != nil {
		return nil, err
	}
	s := newStore(c)
	d := &dialer{s: s, stop: make(chan struct{})}
	d.opt = d.counting(opt)
	s.dial = d
	first := make(chan error, 1)
	go d.run(first)
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case err := <-first:
		if err != nil {
			return nil, err
		}
	case <-t.C:
	}
	return s, nil
}

// dialer makes the client of a Dial store in the background.
type dialer struct {
	s      *Store
	opt    rueidis.ClientOption
	dialed atomic.Bool           // the current attempt opened a connection, or tried to
	cause  atomic.Pointer[error] // why the store is not up: errNotConnected and the last error
	stop   chan struct{}         // closed by close
	mu     sync.Mutex            // orders close and the client's arrival
	client rueidis.Client        // the client made, once made
	closed bool                  // close was called
	tries  atomic.Int64          // attempts made (tests)
}

// counting returns opt dialling as it would, and recording in d.dialed
// that a connection was tried.
func (d *dialer) counting(opt rueidis.ClientOption) rueidis.ClientOption {
	ctxFn, fn := opt.DialCtxFn, opt.DialFn
	opt.DialFn = nil
	opt.DialCtxFn = func(ctx context.Context, dst string, nd *net.Dialer, tc *tls.Config) (net.Conn, error) {
		d.dialed.Store(true)
		switch {
		case ctxFn != nil:
			return ctxFn(ctx, dst, nd, tc)
		case fn != nil:
			return fn(dst, nd, tc)
		case tc != nil:
			td := tls.Dialer{NetDialer: nd, Config: tc}
			return td.DialContext(ctx, "tcp", dst)
		}
		return nd.DialContext(ctx, "tcp", dst)
	}
	return opt
}

// run makes the client, retrying with back-off, and reports the outcome
// of its first attempt on first: an error when it cannot ever succeed,
// else nil.
func (d *dialer) run(first chan<- error) {
	report := func(err error) {
		if first != nil {
			first <- err
			first = nil
		}
	}
	wait := minDialWait
	for {
		d.dialed.Store(false)
		c, err := rueidis.NewClient(d.opt)
		d.tries.Add(1)
		if err == nil {
			d.up(c)
			report(nil)
			return
		}
		if !d.dialed.Load() { // refused before any connection: the options
			err = fmt.Errorf("%w: redisstore: Dial: %w", floodgate.ErrInvalidConfig, err)
			d.setCause(err)
			report(err)
			return
		}
		d.setCause(err)
		report(nil)
		select {
		case <-d.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, maxDialWait)
	}
}

func (d *dialer) setCause(err error) {
	e := fmt.Errorf("%w: %w", errNotConnected, err)
	d.cause.Store(&e)
}

// up hands the client c to the store, or closes it when the store was
// closed meanwhile.
func (d *dialer) up(c rueidis.Client) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		c.Close()
		return
	}
	d.client = c
	d.s.client = c
	d.s.cluster = c.Mode() == rueidis.ClientModeCluster
	d.s.state.CompareAndSwap(stateDialing, stateUp) // publishes client and cluster
}

// close stops the dialling and closes the client made, if any.
func (d *dialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	close(d.stop)
	if d.client != nil {
		d.client.Close()
	}
}

// notUp returns the error of a call while the store is in state st (not
// stateUp).
func (s *Store) notUp(st int32) error {
	if st == stateClosed {
		return fmt.Errorf("redisstore: %w", floodgate.ErrClosed)
	}
	if e := s.dial.cause.Load(); e != nil {
		return *e
	}
	return errNotConnected
}

// ready returns nil when the store has its client, else the error of a
// call.
func (s *Store) ready() error {
	if st := s.state.Load(); st != stateUp {
		return s.notUp(st)
	}
	return nil
}
