package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"

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
	if bits == a.BitLen() {
		return a.String()
	}
	p, _ := a.Prefix(bits)
	return p.String()
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
