package algo

import (
	"hash/fnv"
	"strconv"
	"sync"
)

var (
	identityMu   sync.Mutex
	identitySeen = map[string]int{}
)

// Identity returns the namespace of a limit: the 64-bit identity under which
// stores keep its state.
//
// With a policy name, the identity is a hash of the algorithm's name and the
// policy name alone: two limiters with the same name and algorithm share
// each key's state (they are the same limit), and a change of parameters
// under one name keeps the state.
//
// Without a policy name, the identity is a hash of params (the algorithm's
// parameters, as text) and of how many identities were made from the same
// params before in this process: two unnamed limiters never share state,
// even with equal parameters. Processes that build their unnamed limiters in
// the same order derive the same identities (and so share state on a shared
// store); name every limit whose state processes share.
func Identity(algorithm, policy, params string) uint64 {
	h := fnv.New64a()
	if policy != "" {
		h.Write([]byte(algorithm))
		h.Write([]byte{0})
		h.Write([]byte(policy))
		return h.Sum64()
	}
	base := algorithm + "\x00" + params
	identityMu.Lock()
	k := identitySeen[base]
	identitySeen[base] = k + 1
	identityMu.Unlock()
	h.Write([]byte{1})
	h.Write([]byte(base))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(k), 10))
	return h.Sum64()
}
