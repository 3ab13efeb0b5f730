package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
)

// unknownPeer is the key of requests whose peer address cannot be parsed
// (a Unix socket, a hand-made request): they share one budget rather than
// escape limiting.
const unknownPeer = "unknown-peer"

// ClientIP returns the address the middleware would attribute r to, given
// the trusted proxies (reporting in X-Forwarded-For), before prefix
// aggregation. ok is false when the peer address cannot be parsed.
func ClientIP(r *http.Request, trusted ...netip.Prefix) (addr netip.Addr, ok bool) {
	c := config{trusted: trusted, fwdHeader: hXFF}
	a, _, ok := c.clientAddr(r)
	return a, ok
}

// clientAddr returns the client address and, when it is the peer's own
// IPv4 address in canonical form, the substring of r.RemoteAddr that spells
// it (so that the common case builds its key without allocating).
func (c *config) clientAddr(r *http.Request) (netip.Addr, string, bool) {
	host := r.RemoteAddr
	var peer netip.Addr
	if ap, err := netip.ParseAddrPort(host); err == nil {
		peer = ap.Addr()
		if i := strings.LastIndexByte(host, ':'); i > 0 {
			host = host[:i]
		}
	} else if a, err := netip.ParseAddr(host); err == nil {
		peer = a
	} else {
		return netip.Addr{}, "", false
	}
	peer = peer.Unmap().WithZone("") // a zoned address matches no prefix
	if len(c.trusted) == 0 || !c.isTrusted(peer) {
		if peer.Is4() && len(host) > 0 && host[0] != '[' && strings.IndexByte(host, ':') < 0 {
			return peer, host, true
		}
		return peer, "", true
	}
	return c.forwardedFor(r, peer), "", true
}

func (c *config) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedFor walks the configured forwarding header from the right,
// skipping trusted proxies, and returns the first address that is not one.
// An element that does not parse stops the walk at the nearest trusted hop:
// everything to its left was written by nobody we trust. When every element
// is trusted, the leftmost one is the client.
func (c *config) forwardedFor(r *http.Request, peer netip.Addr) netip.Addr {
	forwarded := c.fwdHeader == hForwarded
	vals := r.Header[c.fwdHeader]
	last := peer
	it := revList{vals: vals, i: len(vals) - 1}
	for {
		elem, more := it.next()
		if !more {
			return last
		}
		var a netip.Addr
		var ok bool
		if forwarded {
			a, ok = parseForwardedFor(elem)
		} else {
			a, ok = parseNode(strings.TrimSpace(elem))
		}
		if !ok {
			return last
		}
		if !c.isTrusted(a) {
			return a
		}
		last = a
	}
}

// revList yields the comma-separated elements of a multi-line header from
// the last one to the first, without allocating.
type revList struct {
	vals    []string
	i       int    // index of the line being read
	rest    string // unread part of vals[i]
	started bool
}

func (it *revList) next() (string, bool) {
	if !it.started {
		if it.i < 0 {
			return "", false
		}
		it.rest, it.started = it.vals[it.i], true
	}
	j := strings.LastIndexByte(it.rest, ',')
	if j < 0 {
		elem := it.rest
		it.i--
		it.started = false
		return elem, true
	}
	elem := it.rest[j+1:]
	it.rest = it.rest[:j]
	return elem, true
}

// parseNode parses an address as X-Forwarded-For and Forwarded write it:
// "192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]:80".
func parseNode(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// parseForwardedFor extracts the for= node of one RFC 7239 element.
func parseForwardedFor(elem string) (netip.Addr, bool) {
	for elem != "" {
		var pair string
		if i := strings.IndexByte(elem, ';'); i >= 0 {
			pair, elem = elem[:i], elem[i+1:]
		} else {
			pair, elem = elem, ""
		}
		pair = strings.TrimSpace(pair)
		if len(pair) < 4 || !strings.EqualFold(pair[:4], "for=") {
			continue
		}
		v := pair[4:]
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		return parseNode(v)
	}
	return netip.Addr{}, false
}

// ipKey turns a client address into its key: the address itself, or the
// prefix it is aggregated to. plain, when set, already spells the address.
func (c *config) ipKey(a netip.Addr, plain string) string {
	a = a.WithZone("")
	bits := c.v6Bits
	if a.Is4() {
		if c.v4Bits == 32 && plain != "" {
			return plain
		}
		bits = c.v4Bits
	}
	var arr [64]byte
	if bits == a.BitLen() {
		return string(a.AppendTo(arr[:0]))
	}
	p, _ := a.Prefix(bits)
	return string(p.AppendTo(arr[:0]))
}

// credentialKey turns a credential (a header value) into its key: "hdr#"
// and the base64url of the first 128 bits of HMAC-SHA256(secret, value).
// The credential never reaches a store or an observer.
func (c *config) credentialKey(v string) string {
	return c.hasher.Key(v)
}

// key returns the request's key for the middleware's own limiter and the
// scope it was taken from.
func (c *config) key(r *http.Request) (key string, fromIP bool) {
	switch c.keyKind {
	case keyHeader:
		if v := r.Header[c.header]; len(v) > 0 && v[0] != "" {
			key = c.credentialKey(v[0])
		}
	case keyCustom:
		key = c.keyFunc(r)
	}
	if key == "" {
		fromIP = true
		key = c.clientKey(r)
	}
	if c.keyPrefix != "" {
		key = c.keyPrefix + key
	}
	return key, fromIP
}

// clientKey is the client IP key of r (trusted proxies and prefixes
// applied), or the shared key of unknown peers.
func (c *config) clientKey(r *http.Request) string {
	if a, plain, ok := c.clientAddr(r); ok {
		return c.ipKey(a, plain)
	}
	return unknownPeer
}

// ClientIPKey is the [KeyFunc] that keys by client IP (with the trusted
// proxies and IP prefixes of the middleware it is used in): for a limit
// added with [WithLimit] to a middleware keyed by something else.
var ClientIPKey KeyFunc = func(*http.Request) string { return "" }
