// Package store binds algorithms to the state they run on.
//
// A user of floodgate meets two things here: [Store], the interface of the
// stores (the embedded store/memstore, store/redisstore for a fleet), which
// is passed to an algorithm's constructor, and [Limiter], the one keyed
// limiter type every algorithm returns (bucket.NewKeyed, leaky.NewKeyed,
// window.NewFixed, window.NewSlidingLog, window.NewSlidingCounter):
//
//	s, _ := memstore.New()
//	perClient, _ := bucket.NewKeyed(s, bucket.Config{Name: "per-client", Rate: floodgate.PerSecond(10), Burst: 20})
//	d, err := perClient.Take(ctx, clientIP, 1)
//
// A Limiter takes (Take), gives back (Refund) and looks (Peek); it describes
// its policy (Policy) for transports to advertise, and decides groups of
// checks on one or several stores all or nothing ([floodgate.TakeAll]).
//
// # For implementers
//
// A store implements [Store]: Apply steps one key, ApplyAll steps several
// atomically, and store/storetest is the conformance suite it must pass.
// The algorithms' side of the contract (State, Spec, the Lua twin, the
// optional fast paths) is in store/algo.
//
// # Concurrency
//
// Limiters are immutable and safe for concurrent use; so must every Store
// be.
package store
