package algo

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
)

// MaxPredecessors is the most earlier versions of a limit that the
// versions of its [Lineage] read a key's state through, besides the newest.
const MaxPredecessors = 8

// Converter is an optional interface of an [Algorithm] whose states carry
// over a live change of its limit: another algorithm of the same family
// (Spec.Name, reserving twins included) and the same limit (Spec.Namespace)
// with other parameters, an earlier or a later version.
//
// The rule, the same for every floodgate algorithm (each package documents
// its arithmetic): a key keeps the units it has left, capped by the new
// capacity. A drained key stays drained whichever way the limit moves,
// lowering never grants anything, raising never grants a burst, and the
// rate or window applies from the change on. A key with no state (fresh, or
// back to full and dropped) is full under the new parameters.
//
// Convert is twinned in Lua like the step: for an algorithm that is a
// Converter, Spec.Lua.Source evaluates to the step and a second function,
// the convert (see [Lua]), and both must agree exactly.
type Converter interface {
	Algorithm

	// Converts reports whether Convert takes the states of from: a version
	// of this limit (same family, same Namespace).
	Converts(from Algorithm) bool

	// Convert returns s, a state that from's steps left, as this
	// algorithm's state at now (Unix µs), by the rule above. It reads no
	// clock, has no side effects and never panics; it may return a state
	// that is full at now (W[0] <= now), which a store need not keep. The
	// rule of [State].Log holds: the returned log may share s.Log's array,
	// never changing the entries s holds. from must be one that Converts
	// accepts; otherwise Convert returns the zero State.
	Convert(s State, now int64, from Algorithm) State

	// FullWithin is the longest time (µs) a state this algorithm returns
	// may take to be full again: W[0] - now <= FullWithin() for every
	// state Step or Convert returns at now. Past it, every state an earlier
	// version left is full, and that version need not be read through.
	FullWithin() int64

	// WithVersions returns this algorithm as a [Lineage] of the versions
	// v. Call it through [Succeed], which fills v.
	WithVersions(v *Versions) Lineage
}

// Versions is the versions of one limit that a store keeping state in
// memory reads a key's state through: shared by every [Lineage] that
// [Succeed] made of the limit, each one holding it, so that a version
// replaced while a decision on it is in flight reads through the versions
// that came after it as well as those before.
type Versions struct {
	list atomic.Pointer[[]Algorithm]
}

// Load returns the versions, newest first: the last [Succeed]'s next and
// the predecessors it kept. It is safe for concurrent use; a nil *Versions
// holds none.
func (v *Versions) Load() []Algorithm {
	if v == nil {
		return nil
	}
	if p := v.list.Load(); p != nil {
		return *p
	}
	return nil
}

// Lineage is an optional interface of an [Algorithm]: a version of a limit
// whose other versions may still hold states, in a store that keeps each
// version's states apart. Build one with [Succeed].
//
// A store that keeps state in memory, and so cannot keep the parameters
// beside each state, keeps each version's states under a namespace of its
// own: a Lineage implements [Layout], whose namespace is
// [VersionNamespace] of its Spec (the same for every algorithm of the same
// limit and parameters). When the store finds no state for a key there,
// it looks the key up under the namespace ([MemoryNamespace]) of each of
// Versions, newest first, skipping its own; the first state found is
// converted ([Converter.Convert]) and moved: removed from that namespace
// and kept under the Lineage's. A key found nowhere is fresh. Since every
// version of the limit reads through the same Versions, the one being
// replaced included, a key's state sits under one namespace of them at a
// time, and a decision made on any version, before or after a change,
// finds it there.
//
// A store whose states carry the parameters that wrote them (Redis) keeps
// one state per key under Spec.Namespace, and converts it whenever its
// parameters are not the algorithm's; it ignores Versions.
type Lineage interface {
	Converter
	// Versions returns the versions of the limit whose states are read
	// through (shared by the limit's Lineages).
	Versions() *Versions
}

// Succeed returns next as the newest version of its limit, and makes the
// limit's [Versions] next and preds (newest first): the Versions of next,
// when it is a Lineage already, else of the first of preds that is one,
// else new ones. Every Lineage sharing them reads through them from then
// on. next must be a [Converter] that Converts each of preds; preds whose
// namespace in memory is next's own ([VersionNamespace]: the same
// parameters) or an earlier pred's are left out, and those beyond
// [MaxPredecessors] too. It returns an error wrapping
// [floodgate.ErrInvalidConfig] when next cannot convert one of preds.
func Succeed(next Algorithm, preds []Algorithm) (Lineage, error) {
	c, ok := next.(Converter)
	if !ok || next == nil {
		return nil, fmt.Errorf("%w: algorithm cannot carry state over a change", floodgate.ErrInvalidConfig)
	}
	var vs *Versions
	if l, ok := next.(Lineage); ok {
		vs = l.Versions()
	}
	for _, p := range preds {
		if p == nil || !c.Converts(p) {
			return nil, fmt.Errorf("%w: %s cannot convert the states of %v", floodgate.ErrInvalidConfig, next.Spec().Name, describe(p))
		}
		if l, ok := p.(Lineage); ok && vs == nil {
			vs = l.Versions()
		}
	}
	if vs == nil {
		vs = new(Versions)
	}
	lg := c.WithVersions(vs)
	list := []Algorithm{lg}
	seen := []uint64{VersionNamespace(next.Spec())}
	for _, p := range preds {
		ns := MemoryNamespace(p)
		if contains(seen, ns) {
			continue
		}
		if len(list) > MaxPredecessors {
			break
		}
		seen = append(seen, ns)
		list = append(list, p)
	}
	vs.list.Store(&list)
	return lg, nil
}

func describe(a Algorithm) string {
	if a == nil {
		return "a nil algorithm"
	}
	return strconv.Quote(a.Spec().Name)
}

func contains(xs []uint64, x uint64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// VersionNamespace is the namespace under which a store that keeps state in
// memory keeps the states of a [Lineage] with Spec sp: Spec.Namespace mixed
// with a hash of the family (Name) and the state's Params ([StateParams]),
// so that each version of
// a limit (each set of parameters) has its own, and two Lineages of the
// same limit and parameters share theirs.
func VersionNamespace(sp Spec) uint64 {
	h := fnv.New64a()
	h.Write([]byte(sp.Name))
	var b [20]byte
	for _, p := range StateParams(sp) {
		h.Write([]byte{0})
		h.Write(strconv.AppendInt(b[:0], p, 10))
	}
	// A finaliser (splitmix64's) spreads the hash before it is mixed in:
	// the namespace is XORed into every id of the store.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	ns := sp.Namespace ^ x
	if ns == sp.Namespace {
		ns ^= 1
	}
	return ns
}

// MemoryNamespace is the namespace under which a store that keeps state in
// memory keeps alg's states: its Layout's namespace, else Spec.Namespace.
func MemoryNamespace(alg Algorithm) uint64 {
	if l, ok := alg.(Layout); ok {
		ns, _, _, _ := l.Layout()
		return ns
	}
	return alg.Spec().Namespace
}

// StateParams returns the Params of sp that describe its states: the first
// Lua.StateParams of them, or all when it is 0.
func StateParams(sp Spec) []int64 {
	p := sp.Lua.Params
	if n := sp.Lua.StateParams; n > 0 && n < len(p) {
		return p[:n]
	}
	return p
}
