// Package credkey turns credentials (service tokens, API keys) into
// rate-limit keys with a keyed hash, so that no store and no observer ever
// sees a credential in clear. httplimit and grpclimit (keys read from a
// header or metadata with WithHeaderKey, under WithKeySecret), package
// policy (descriptor entries marked Credential) and the Envoy rate limit
// service (module rls: descriptors marked credential, prefix "#") use it.
package credkey

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"sync"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// processSecret is the secret of hashers built without one: random, drawn
// once per process.
var processSecret = sync.OnceValue(func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand aborts the program instead)
	return b
})

// Hasher derives keys from credentials. It is safe for concurrent use.
type Hasher struct {
	prefix string
	pool   sync.Pool // of *state
}

// state is one pooled HMAC with the buffers a key needs, so that a key
// costs one hash and one allocation (the key string).
type state struct {
	h     hash.Hash
	sum   [sha256.Size]byte
	chunk [256]byte // the value is copied through it: no []byte(v) allocation
}

// New returns a Hasher with secret (nil: the per-process random secret)
// whose keys start with prefix.
func New(secret []byte, prefix string) *Hasher {
	if secret == nil {
		secret = processSecret()
	}
	secret = bytes.Clone(secret)
	h := &Hasher{prefix: prefix}
	h.pool.New = func() any { return &state{h: hmac.New(sha256.New, secret)} }
	return h
}

// keyLen is the length of a key's hash part: 128 bits, unpadded base64url.
const keyLen = 22

// Key returns prefix + base64url(HMAC-SHA256(secret, credential)[:16]).
func (h *Hasher) Key(credential string) string {
	st := h.pool.Get().(*state)
	st.h.Reset()
	for v := credential; len(v) > 0; {
		n := copy(st.chunk[:], v)
		st.h.Write(st.chunk[:n])
		v = v[n:]
	}
	sum := st.h.Sum(st.sum[:0])
	out := make([]byte, len(h.prefix)+keyLen)
	copy(out, h.prefix)
	base64.RawURLEncoding.Encode(out[len(h.prefix):], sum[:16])
	h.pool.Put(st)
	return unsafe.String(&out[0], len(out)) // out is never written again
}

// Shared reports whether any of ls decides on a store that several
// processes share ([store.IsShared]): a transport hashing credentials with
// the per-process random secret must then refuse to run, since each node
// would keep its own budget per credential. A limiter that is not a
// [store.Limiter] (or does not say which store it runs on), and does not
// say it is shared itself (a Shared() bool method, as lease.Limiter has),
// is taken for a local one.
func Shared(ls ...floodgate.Limiter) bool {
	for _, l := range ls {
		if sl, ok := l.(interface{ Store() store.Store }); ok && store.IsShared(sl.Store()) {
			return true
		}
		if sh, ok := l.(interface{ Shared() bool }); ok && sh.Shared() {
			return true // a limiter on a shared state of its own (lease.Limiter)
		}
	}
	return false
}
