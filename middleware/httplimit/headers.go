package httplimit

import (
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/internal/ratehdr"
	"github.com/floodgate-go/floodgate/middleware"
)

// limitFields is what a response's limits write in the IETF fields:
// Middleware's limits have their members precomputed, a policy set's
// checks describe theirs request by request. Both append into the
// response's one buffer.
type limitFields interface {
	// policyField is the whole RateLimit-Policy value when it is the same
	// for every response, else "".
	policyField() string
	// appendPolicy appends the RateLimit-Policy member of limit i, whose
	// limiter is l and whose decision's Limit is limit.
	appendPolicy(buf []byte, i int, l floodgate.Limiter, limit int64) []byte
	// appendName appends the start of limit i's RateLimit member,
	// `"name";r=`, and returns the quota its r is measured against. (The
	// methods take a check's parts, not the checks: a slice handed to an
	// interface method escapes, and Middleware's one check lives on the
	// stack.)
	appendName(buf []byte, i int, l floodgate.Limiter, limit int64) ([]byte, int64)
}

// headerBlock holds everything the informational headers of one response
// need: the one-element []string values the header map points to and the
// bytes of the formatted fields. One allocation per response, whatever the
// number of fields (unless the members outgrow buf).
type headerBlock struct {
	vals [7]string
	buf  [128]byte
}

// writeHeaders writes the informational header groups of verdict v, whose
// checks hold each limit's own decision, with f's members; the field names
// are the canonical constants, written straight into the map.
func (c *config) writeHeaders(f limitFields, h http.Header, checks []floodgate.Check, v *admit.Verdict, scope string) {
	if c.headers&(middleware.HeadersIETF|middleware.HeadersLegacy|middleware.HeadersDiagnostic) == 0 {
		return
	}
	d := v.Decision
	limit := clampSF(d.Limit)
	remaining := min(clampSF(d.Remaining), limit)

	blk := new(headerBlock)
	buf := blk.buf[:0]
	var sp ratehdr.Fields // an empty span: the static RateLimit-Policy value
	if c.headers&middleware.HeadersIETF != 0 {
		a := len(buf)
		if f.policyField() == "" {
			for i := range checks {
				if i > 0 {
					buf = append(buf, ", "...)
				}
				buf = f.appendPolicy(buf, i, checks[i].Limiter, checks[i].Decision.Limit)
			}
		}
		sp.Add(hRateLimitPolicy, a, len(buf))
		a = len(buf)
		buf = appendCurrent(buf, f, checks, v)
		if len(buf) > a {
			sp.Add(hRateLimit, a, len(buf))
		}
	}
	if c.headers&middleware.HeadersLegacy != 0 {
		for _, x := range [3]struct {
			name string
			v    int64
		}{{hLimit, limit}, {hRemaining, remaining}, {hReset, min(ceilSeconds(d.ResetAfter), maxSF)}} {
			a := len(buf)
			buf = strconv.AppendInt(buf, x.v, 10)
			sp.Add(x.name, a, len(buf))
		}
	}
	// buf is never written again: strings may point into it. (When many
	// members made it outgrow blk.buf, it lives in its own heap array,
	// equally immutable from here on.)
	putFields(h, blk, buf, &sp, f.policyField(), v.Kind == admit.Deny, remaining)
	if c.headers&middleware.HeadersDiagnostic != 0 {
		n := sp.N
		if c.tier != "" {
			blk.vals[n] = c.tier
			h[hTier] = blk.vals[n : n+1 : n+1]
		}
		blk.vals[n+1] = scope
		h[hScope] = blk.vals[n+1 : n+2 : n+2]
	}
}

// oneBlock holds the informational header values of a one-limit
// Middleware response without diagnostic fields: the one-element []string
// values the header map points to and the bytes of the formatted numbers,
// in one allocation of 128 bytes.
type oneBlock struct {
	vals [5]string // indexed by fPolicy...fReset
	buf  [48]byte
}

// The fields of a oneBlock.
const (
	fPolicy = iota
	fRateLimit
	fLimit
	fRemaining
	fReset
)

// writeHeaders writes the informational headers of verdict v. A single
// limit's fields, in a header map no other rate-limit middleware wrote
// to, take writeOne's shorter path; everything else (several limits,
// diagnostic fields, stacked middlewares) the general one.
func (m *limiterMW) writeHeaders(h http.Header, checks []floodgate.Check, v *admit.Verdict, scope string) {
	c := &m.cfg
	if len(checks) == 1 && c.headers&middleware.HeadersDiagnostic == 0 && c.headers&(middleware.HeadersIETF|middleware.HeadersLegacy) != 0 {
		_, stackedIETF := h[hRateLimit]
		_, stackedLegacy := h[hRemaining]
		if !stackedIETF && !stackedLegacy {
			m.writeOne(h, v)
			return
		}
	}
	c.writeHeaders(m, h, checks, v, scope)
}

// writeOne writes the IETF and legacy fields of a one-limit verdict v into
// h, which holds none of them: the same bytes as the general path, with
// the constant parts precomputed (the RateLimit-Policy value, the
// RateLimit member's name, X-RateLimit-Limit when the decision's limit is
// the capacity) and X-RateLimit-Remaining and -Reset pointing into the
// RateLimit member's digits when they are the same numbers.
func (m *limiterMW) writeOne(h http.Header, v *admit.Verdict) {
	hd := &m.hdrs[0]
	ietf, legacy := m.cfg.headers&middleware.HeadersIETF != 0, m.cfg.headers&middleware.HeadersLegacy != 0
	d := v.Decision
	blk := new(oneBlock)
	buf := blk.buf[:0]
	// Field k of the block is blk.vals[k], or the bytes buf[from[k]:to[k]]
	// when it is formatted (from[k] < to[k]).
	var from, to [5]int
	span := func(k, a int) { from[k], to[k] = a, len(buf) }
	var r, t int64
	sent := false
	if ietf {
		blk.vals[fPolicy] = m.static
		if m.static == "" {
			a := len(buf)
			buf = m.appendPolicy(buf, 0, nil, d.Limit)
			span(fPolicy, a)
		}
		retry := time.Duration(0)
		if v.Kind == admit.Deny {
			retry = v.RetryAfter
		}
		r, t, sent = ratehdr.Member(d, hd.q, retry, v.Reason == admit.ReasonDelay)
		if sent {
			a := len(buf)
			buf = append(buf, hd.rl...)
			from[fRemaining] = len(buf)
			buf = strconv.AppendInt(buf, r, 10)
			to[fRemaining] = len(buf)
			buf = append(buf, ";t="...)
			from[fReset] = len(buf)
			buf = strconv.AppendInt(buf, t, 10)
			to[fReset] = len(buf)
			span(fRateLimit, a)
		}
	}
	if legacy {
		limit := clampSF(d.Limit)
		remaining := min(clampSF(d.Remaining), limit)
		reset := min(ceilSeconds(d.ResetAfter), maxSF)
		if limit == hd.capacity && hd.capacityField != "" {
			blk.vals[fLimit] = hd.capacityField
		} else {
			a := len(buf)
			buf = strconv.AppendInt(buf, limit, 10)
			span(fLimit, a)
		}
		if !sent || r != remaining {
			a := len(buf)
			buf = strconv.AppendInt(buf, remaining, 10)
			span(fRemaining, a)
		}
		if !sent || t != reset {
			a := len(buf)
			buf = strconv.AppendInt(buf, reset, 10)
			span(fReset, a)
		}
	}
	// buf is never written again: the strings may point into it (or into
	// the heap array append moved it to, equally immutable from here on).
	for k := range blk.vals {
		if from[k] < to[k] {
			blk.vals[k] = unsafe.String(&buf[from[k]], to[k]-from[k])
		}
	}
	blk.put(h, ietf, sent, legacy)
}

// put sets the fields of b in h, under their canonical names: the IETF
// ones (RateLimit only when sent), the legacy ones.
func (b *oneBlock) put(h http.Header, ietf, sent, legacy bool) {
	if ietf {
		h[hRateLimitPolicy] = b.vals[fPolicy : fPolicy+1 : fPolicy+1]
		if sent {
			h[hRateLimit] = b.vals[fRateLimit : fRateLimit+1 : fRateLimit+1]
		}
	}
	if legacy {
		h[hLimit] = b.vals[fLimit : fLimit+1 : fLimit+1]
		h[hRemaining] = b.vals[fRemaining : fRemaining+1 : fRemaining+1]
		h[hReset] = b.vals[fReset : fReset+1 : fReset+1]
	}
}

// putFields puts the fields of sp (spans of buf) into h. Stacked middlewares: an outer one
// may already have written its fields. The IETF fields are lists and get
// this middleware's members too (on a refusal, RateLimit holds only the
// refusing limits' members); the legacy fields hold one policy and keep
// the one with the fewest units remaining.
func putFields(h http.Header, blk *headerBlock, buf []byte, sp *ratehdr.Fields, policyField string, refused bool, remaining int64) {
	oldRem, stackedLegacy := h[hRemaining]
	_, stackedIETF := h[hRateLimit]
	if refused {
		delete(h, hRateLimit)
	}
	keepLegacy := false
	if stackedLegacy && len(oldRem) > 0 {
		if v, err := strconv.ParseInt(oldRem[0], 10, 64); err == nil && v <= remaining {
			keepLegacy = true
		}
	}
	for i := 0; i < sp.N; i++ {
		if sp.From[i] == sp.To[i] {
			blk.vals[i] = policyField // the one field that can be empty
		} else {
			blk.vals[i] = unsafe.String(&buf[sp.From[i]], sp.To[i]-sp.From[i])
		}
		val := blk.vals[i : i+1 : i+1]
		switch name := sp.Key[i]; {
		case name == hRateLimitPolicy || name == hRateLimit:
			if stackedIETF {
				if old := h[name]; len(old) > 0 {
					val = append(old[:len(old):len(old)], val[0])
				}
			}
		case keepLegacy:
			continue
		}
		h[sp.Key[i]] = val
	}
}

// appendCurrent appends verdict v's RateLimit members to buf, as
// [ratehdr.Member] chooses them: every limit's on an admission, only the
// refusing limits' on a refusal.
func appendCurrent(buf []byte, f limitFields, checks []floodgate.Check, v *admit.Verdict) []byte {
	retry := time.Duration(0)
	if v.Kind == admit.Deny {
		retry = v.RetryAfter
	}
	sep := false
	for i := range checks {
		cd := checks[i].Decision
		if len(checks) == 1 {
			cd = v.Decision
		}
		a := len(buf)
		if sep {
			buf = append(buf, ", "...)
		}
		var q int64
		buf, q = f.appendName(buf, i, checks[i].Limiter, checks[i].Decision.Limit)
		r, t, send := ratehdr.Member(cd, q, retry, v.Reason == admit.ReasonDelay)
		if !send {
			buf = buf[:a]
			continue
		}
		sep = true
		buf = strconv.AppendInt(buf, r, 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, t, 10)
	}
	return buf
}

// Middleware's limits: members precomputed by buildHeaders.

func (m *limiterMW) policyField() string { return m.static }

func (m *limiterMW) appendPolicy(buf []byte, i int, _ floodgate.Limiter, limit int64) []byte {
	hd := &m.hdrs[i]
	if hd.static != "" {
		return append(buf, hd.static...)
	}
	buf = append(buf, hd.qPrefix...)
	buf = strconv.AppendInt(buf, clampSF(limit), 10)
	return append(buf, hd.w...)
}

func (m *limiterMW) appendName(buf []byte, i int, _ floodgate.Limiter, _ int64) ([]byte, int64) {
	return append(buf, m.hdrs[i].rl...), m.hdrs[i].q
}

// A policy set's checks: each check's limiter describes its policy.

// described is what a check's limiter l says of its policy: its name
// ("default" when it has none), and the q and w it advertises (q the
// decision's limit when it describes no quota).
func described(l floodgate.Limiter, limit int64) (name string, q, w int64) {
	var p floodgate.Description
	if ds, ok := l.(floodgate.Describer); ok {
		p = ds.Describe()
	}
	name = p.Name
	if name == "" {
		name = "default"
	}
	q, w = ratehdr.Quota(p)
	if q == 0 {
		q = clampSF(limit)
	}
	return name, q, w
}

func (m *policiesMW) policyField() string { return "" }

func (m *policiesMW) appendPolicy(buf []byte, _ int, l floodgate.Limiter, limit int64) []byte {
	name, q, w := described(l, limit)
	buf = appendSF(buf, name)
	buf = append(buf, ";q="...)
	buf = strconv.AppendInt(buf, q, 10)
	if w > 0 {
		buf = append(buf, ";w="...)
		buf = strconv.AppendInt(buf, w, 10)
	}
	return buf
}

func (m *policiesMW) appendName(buf []byte, _ int, l floodgate.Limiter, limit int64) ([]byte, int64) {
	name, q, _ := described(l, limit)
	buf = appendSF(buf, name)
	return append(buf, ";r="...), q
}
