// Package algo is the contract between floodgate's algorithms and its
// stores, for those who write either. A user of floodgate never imports it:
// the algorithm packages (bucket, leaky, window) turn a Config into an
// [Algorithm], and the stores (memstore, redisstore) run it.
//
// # The contract
//
// An [Algorithm] is a pure step over one key's [State]:
// (state, now, n) -> (state, Decision), with time in integer Unix
// microseconds passed in, never read. A store keeps the state, reads its own
// clock (or the server's) once per call and runs the step atomically per key.
// The [Spec] tells the store how much state to keep (Words, MaxLog), under
// which identity (Namespace, see [Identity]), the largest cost (Capacity),
// and the step's Lua twin, which a scripting store (Redis) runs instead of
// the Go step. Both must return identical decisions on identical inputs: the
// storetest package checks it against a real Redis.
//
// # Adding an algorithm
//
// Write the Go step, its Lua twin, and one call of storetest.RunAlgorithm
// from the algorithm's tests; that runs the store conformance checks and the
// Go-to-Lua equivalence on random sequences. [Layout], [WordStepper] and
// [StateStepper] are optional fast paths a store may use; when implemented
// they must agree exactly with Spec and Step.
//
// # Live changes
//
// An algorithm that is a [Converter] carries a key's state over a change of
// its parameters under one name (see Converter for the rule: a key keeps the
// units it has left, capped by the new capacity). [Succeed] makes the new
// version a [Lineage] of the earlier ones, whose states a memory store keeps
// apart (one namespace per version, [VersionNamespace]) and reads through on
// a miss, on every version of the limit (its [Versions] are shared, so a
// version replaced while a decision on it is in flight reads through the
// newer ones); a store that keeps the parameters beside each state (Redis, with
// [StateParams]) converts in its script instead. storetest.RunConverter
// checks the rule and storetest.RunConversion a store's carrying over.
//
// # Concurrency
//
// Algorithms are immutable and safe for concurrent use. [Identity] is safe
// for concurrent use.
package algo
