// Package credkey turns credentials (service tokens, API keys) into
// rate-limit keys with a keyed hash, so that no store and no observer ever
// sees a credential in clear. The transports share it.
package credkey

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"sync"
	"unsafe"
)

// processSecret is the secret of hashers built without one: random, drawn
// once per process.
var processSecret = sync.OnceValue(func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
})

// Hasher derives keys from credentials. It is safe for concurrent use.
type Hasher struct {
	prefix string
	pool   sync.Pool // hash.Hash (HMAC-SHA256 under the secret)
}

// New returns a Hasher with secret (nil: the per-process random secret)
// whose keys start with prefix.
func New(secret []byte, prefix string) *Hasher {
	if secret == nil {
		secret = processSecret()
	}
	secret = append([]byte(nil), secret...)
	h := &Hasher{prefix: prefix}
	h.pool.New = func() any { return hmac.New(sha256.New, secret) }
	return h
}

// keyLen is the length of a key's hash part: 16 bytes of the MAC, base64url.
const keyLen = 22

// Key returns prefix + base64url(HMAC-SHA256(secret, credential)[:16]).
func (h *Hasher) Key(credential string) string {
	m := h.pool.Get().(hash.Hash)
	m.Reset()
	var sum [sha256.Size]byte
	// Written through a stack buffer: a []byte(credential) conversion
	// would allocate for long values.
	var buf [64]byte
	for s := credential; len(s) > 0; {
		n := copy(buf[:], s)
		m.Write(buf[:n])
		s = s[n:]
	}
	out := m.Sum(sum[:0])
	h.pool.Put(m)
	b := make([]byte, len(h.prefix)+keyLen)
	copy(b, h.prefix)
	base64.RawURLEncoding.Encode(b[len(h.prefix):], out[:16])
	return unsafe.String(&b[0], len(b)) // b is never written again
}
