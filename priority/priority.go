package priority

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
)

// Class identifies a traffic class: an index into the shedder's classes,
// which are listed from the least important up. The zero Class is the least
// important one, the first to be shed, so that a class left unset, or the
// Class that [Shedder.Class] returns for a name it does not know, never
// makes a request more important than it was meant to be.
type Class int

// The default classes (see [NewShedder]).
const (
	// BestEffort is shed first, at 85% utilisation. It is the zero Class.
	BestEffort Class = iota
	// Standard is shed at 95% utilisation.
	Standard
	// Critical is shed only when the capacity is exhausted (100%).
	Critical
)

// ClassConfig describes one class.
type ClassConfig struct {
	// Name labels the class in statistics and observer events (as
	// Event.Class). Unique and not empty.
	Name string
	// ShedAt in (0, 1] is the utilisation at which the class is shed: a
	// request of the class is admitted only while
	// in-flight < ShedAt * capacity.
	ShedAt float64
}

// defaultClasses returns the three default classes, from the least
// important up: best-effort (shed at 85%), standard (95%) and critical
// (100%), matching [BestEffort], [Standard] and [Critical].
func defaultClasses() []ClassConfig {
	return []ClassConfig{{"best-effort", 0.85}, {"standard", 0.95}, {"critical", 1}}
}

// ErrUnknownClass is returned by Acquire for a class the shedder does not
// have.
var ErrUnknownClass = errors.New("priority: unknown class")

// ClassStats counts one class's Acquire outcomes.
type ClassStats struct {
	// Name is the class's name.
	Name string
	// Admitted and Shed count the requests admitted and rejected.
	Admitted, Shed uint64
}

// Shedder sheds traffic by class from one shared capacity. It is safe for
// concurrent use. Create it with [NewShedder].
type Shedder struct {
	cap     *adaptive.Gate
	classes []ClassConfig
	admit   []atomic.Uint64
	shed    []atomic.Uint64
}

// NewShedder returns a Shedder whose capacity is the current limit of capacity, an
// adaptive (or fixed) gate that it then owns: requests should reach
// capacity only through the returned Shedder, so that every admission is
// subject to the class thresholds. With no classes, the three default classes
// (best-effort shed at 85%, standard at 95%, critical at 100%) are
// used. Classes are listed from the least important to the most (the first
// one is Class 0, the class of unknown names); their ShedAt may not
// decrease along the list.
//
// The wait is capacity's: build it with [adaptive.WithQueue] to make Acquire
// wait in a bounded queue, where a more important class is served first
// when a slot frees (and may take a full queue's place from a less
// important one).
func NewShedder(capacity *adaptive.Gate, classes ...ClassConfig) (*Shedder, error) {
	if capacity == nil {
		return nil, fmt.Errorf("%w: priority: nil capacity gate", floodgate.ErrInvalidConfig)
	}
	if len(classes) == 0 {
		classes = defaultClasses()
	}
	seen := make(map[string]bool, len(classes))
	for i, c := range classes {
		switch {
		case c.Name == "" || seen[c.Name]:
			return nil, fmt.Errorf("%w: priority: class %d needs a unique, non-empty name, got %q", floodgate.ErrInvalidConfig, i, c.Name)
		case !(c.ShedAt > 0 && c.ShedAt <= 1):
			return nil, fmt.Errorf("%w: priority: class %q ShedAt must be in (0, 1], got %v", floodgate.ErrInvalidConfig, c.Name, c.ShedAt)
		case i > 0 && c.ShedAt < classes[i-1].ShedAt:
			return nil, fmt.Errorf("%w: priority: class %q sheds at %v, below the less important %q (%v); classes are listed from the least important up", floodgate.ErrInvalidConfig, c.Name, c.ShedAt, classes[i-1].Name, classes[i-1].ShedAt)
		}
		seen[c.Name] = true
	}
	return &Shedder{
		cap:     capacity,
		classes: append([]ClassConfig(nil), classes...),
		admit:   make([]atomic.Uint64, len(classes)),
		shed:    make([]atomic.Uint64, len(classes)),
	}, nil
}

// Acquire asks for a slot for a request of class c. It returns the token to
// end with Success, Dropped or Ignore, or a rejection wrapping
// [adaptive.ErrLimitExceeded] when the class is shed (after waiting, when the
// capacity has a queue). It returns [ErrUnknownClass] for a class out of
// range and ctx's error when ctx is already done.
func (p *Shedder) Acquire(ctx context.Context, c Class) (*adaptive.Token, error) {
	if c < 0 || int(c) >= len(p.classes) {
		return nil, fmt.Errorf("%w: %d", ErrUnknownClass, c)
	}
	tok, err := p.cap.AcquireRequest(ctx, p.request(c))
	p.count(c, err)
	return tok, err
}

// AcquireFunc is the asynchronous Acquire (see
// [adaptive.Gate.AcquireFunc]): done receives the token or the rejection,
// at once or, when the request waits in the capacity's queue, later; cancel
// withdraws a waiting request.
func (p *Shedder) AcquireFunc(c Class, done func(*adaptive.Token, error)) (cancel func() bool) {
	if c < 0 || int(c) >= len(p.classes) {
		done(nil, fmt.Errorf("%w: %d", ErrUnknownClass, c))
		return func() bool { return false }
	}
	return p.cap.AcquireFunc(p.request(c), func(t *adaptive.Token, err error) {
		p.count(c, err)
		done(t, err)
	})
}

func (p *Shedder) request(c Class) adaptive.Request {
	cc := p.classes[c]
	return adaptive.Request{Share: cc.ShedAt, Rank: int(c), Label: cc.Name}
}

func (p *Shedder) count(c Class, err error) {
	switch {
	case err == nil:
		p.admit[c].Add(1)
	case errors.Is(err, adaptive.ErrLimitExceeded):
		p.shed[c].Add(1)
	}
}

// Class returns the class with the given name, and whether there is one. A
// name it does not know (a missing or misspelt header) gives the least
// important class, Class 0, so that a caller that ignores ok sheds such
// requests first rather than treating them as critical.
func (p *Shedder) Class(name string) (Class, bool) {
	for i, c := range p.classes {
		if c.Name == name {
			return Class(i), true
		}
	}
	return 0, false
}

// Stats returns each class's counters, in class order.
func (p *Shedder) Stats() []ClassStats {
	out := make([]ClassStats, len(p.classes))
	for i, c := range p.classes {
		out[i] = ClassStats{Name: c.Name, Admitted: p.admit[i].Load(), Shed: p.shed[i].Load()}
	}
	return out
}
