package grpclimit

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/credkey"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// unknownPeer is the key of calls whose peer address is not an IP address
// (a Unix socket, an in-process transport, a context without peer): they
// share one budget rather than escape limiting.
const unknownPeer = "unknown-peer"

// peerAddr returns the IP address of the call's peer, without port or zone,
// IPv4-mapped IPv6 addresses unmapped. ok is false when ctx carries no peer
// or the peer is not on an IP network.
func peerAddr(ctx context.Context) (addr netip.Addr, ok bool) {
	p, found := peer.FromContext(ctx)
	if !found || p.Addr == nil {
		return netip.Addr{}, false
	}
	switch a := p.Addr.(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			return netip.Addr{}, false
		}
		return ip.Unmap(), true
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			return netip.Addr{}, false
		}
		return ip.Unmap(), true
	}
	// Other net.Addr implementations: try their string form.
	s := p.Addr.String()
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// peerKey returns the key of the call's peer: its address, or the prefix
// the address is aggregated to.
func (c *config) peerKey(ctx context.Context) string {
	a, ok := peerAddr(ctx)
	if !ok {
		return unknownPeer
	}
	bits := c.v6Bits
	if a.Is4() {
		bits = c.v4Bits
	}
	p, _ := a.Prefix(bits)
	if c.keys != nil {
		return c.keys.get(p)
	}
	return prefixKey(p)
}

// prefixKey spells a peer key: the address alone for a full-length prefix
// ("192.0.2.1"), the prefix otherwise ("2001:db8::/64").
func prefixKey(p netip.Prefix) string {
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String()
	}
	return p.String()
}

// keyCache remembers the key strings of recent peers, so that a peer seen
// before costs no allocation. It is a fixed array of slots indexed by a
// hash of the (masked) address; a slot holds the last peer that hashed to
// it. A miss only costs what no cache would.
type keyCache struct {
	slots [keyCacheSlots]atomic.Pointer[cachedKey]
}

const keyCacheSlots = 1024 // a power of two; 8 KiB of pointers

type cachedKey struct {
	prefix netip.Prefix
	key    string
}

func (kc *keyCache) get(p netip.Prefix) string {
	a := p.Addr().As16()
	h := binary.LittleEndian.Uint64(a[0:8])*0x9e3779b97f4a7c15 ^ binary.LittleEndian.Uint64(a[8:16])*0xc2b2ae3d27d4eb4f
	slot := &kc.slots[(h>>32)&(keyCacheSlots-1)]
	if e := slot.Load(); e != nil && e.prefix == p {
		return e.key
	}
	key := prefixKey(p)
	slot.Store(&cachedKey{prefix: p, key: key})
	return key
}

// key returns the call's main rate-limit key.
func (c *config) key(ctx context.Context, fullMethod string) string {
	var key string
	switch c.keyKind {
	case keyHeader:
		if v := metadata.ValueFromIncomingContext(ctx, c.header); len(v) > 0 && v[0] != "" {
			key = c.hasher.Key(v[0])
		}
	case keyCustom:
		key = c.keyFunc(ctx, fullMethod)
	}
	return c.finish(ctx, key)
}

// finish applies the rules every key follows: "" falls back to the peer,
// and the prefix goes in front.
func (c *config) finish(ctx context.Context, key string) string {
	if key == "" {
		key = c.peerKey(ctx)
	}
	if c.prefix != "" {
		key = c.prefix + key
	}
	return key
}

// PeerKey is a [KeyFunc] that keys a call by its peer, the way the
// interceptors do by default: the IP address for IPv4, its /64 for IPv6,
// "unknown-peer" when the peer is not on an IP network. Give it to
// [WithLimit] for a per-peer limit next to a main key from a header.
func PeerKey(ctx context.Context, _ string) string {
	return defaultPeers.peerKey(ctx)
}

// defaultPeers aggregates peers like a config without WithIPPrefix.
var defaultPeers = &config{v4Bits: 32, v6Bits: 64, keys: new(keyCache)}

// keyLen is the length of a hashed key: "md#" and 128 bits in unpadded
// base64url.
const keyLen = 3 + 22

// newKeyHasher returns the hasher of credentials under secret: keys are
// "md#" + base64url(HMAC-SHA256(secret, value)[:16]).
func newKeyHasher(secret []byte) *credkey.Hasher { return credkey.New(secret, "md#") }

// processHasher is the hasher of every interceptor without WithKeySecret:
// one random secret per process.
var processHasher = sync.OnceValue(func() *credkey.Hasher { return credkey.New(nil, "md#") })
