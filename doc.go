// Package floodgate is an embeddable rate-limiting library: it gives every
// caller a budget, enforces it cheaply at every hop, and makes every "no"
// explicit and honest (a [Decision] with the numbers a 429 response needs).
//
// This root package holds what every part shares: [Decision], the keyed
// [Limiter] interface, [Rate], [Clock], the sentinel errors, [Wait] and the
// composition [All], and the [Observer] hook. The algorithms, stores and
// adapters live in sub-packages.
package floodgate
