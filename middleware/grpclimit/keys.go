package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"sync/atomic"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// UnknownPeer is the key of calls whose peer address is not an IP address
// (a Unix socket, an in-process transport, a context without peer): they
// share one budget rather than escape limiting.
const UnknownPeer = "unknown-peer"

// maxPlainKey is the longest metadata value used as a key verbatim.
const maxPlainKey = 128

// PeerAddr returns the IP address of the call's peer, without port or zone,
// IPv4-mapped IPv6 addresses unmapped. ok is false when ctx carries no peer
// or the peer is not on an IP network.
func PeerAddr(ctx context.Context) (addr netip.Addr, ok bool) {
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
	a, ok := PeerAddr(ctx)
	if !ok {
		return UnknownPeer
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

// metadataKey turns a metadata value into a key in its own namespace.
// Values that are long or not printable ASCII are digested.
func metadataKey(v string) string {
	if len(v) <= maxPlainKey && printableNoSpace(v) {
		return "md:" + v
	}
	sum := sha256.Sum256([]byte(v))
	return "md#" + hex.EncodeToString(sum[:16])
}

func printableNoSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// key returns the call's rate-limit key.
func (c *config) key(ctx context.Context, fullMethod string) string {
	var key string
	switch c.keyKind {
	case keyMetadata:
		if v := metadata.ValueFromIncomingContext(ctx, c.mdName); len(v) > 0 && v[0] != "" {
			key = metadataKey(v[0])
		}
	case keyCustom:
		key = c.keyFunc(ctx, fullMethod)
	}
	if key == "" {
		key = c.peerKey(ctx)
	}
	if c.prefix != "" {
		key = c.prefix + key
	}
	return key
}
