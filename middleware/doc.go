// Package middleware holds what floodgate's transports share: the
// vocabulary of httplimit (net/http) and grpclimit (gRPC), declared
// once so that one value serves both.
//
//   - [FailMode]: what happens to a request when its limits cannot decide.
//   - [DelayMode]: what happens to a request admitted with a shaping delay.
//   - [Acquirer] and [AcquirerFunc]: a concurrency limiter as the shedders
//     (httplimit.Shed, grpclimit.Shed) see it.
//   - [Waiter]: a local throttle for outgoing requests (httplimit's
//     Transport, grpclimit's client interceptors).
//   - [Matcher], [Descriptor] and [Entry]: what limits a request matches,
//     the one thing the Policies wrappers ask of a policy set
//     (policy.Live implements Matcher). The transports depend on this
//     interface, not on the policy plane: importing httplimit or grpclimit
//     does not pull in package policy, its YAML parser or its file watcher.
//
// The key and cost functions stay with each transport: they read a
// transport's request (an *http.Request, a gRPC call's context and
// method).
//
// Zero values: FailOpen and DelayHonour, the defaults of every transport.
// The package holds no state; its types are safe for concurrent use as
// their implementations are.
//
// [httplimit]: https://pkg.go.dev/github.com/floodgate-go/floodgate/middleware/httplimit
// [grpclimit]: https://pkg.go.dev/github.com/floodgate-go/floodgate/middleware/grpclimit
package middleware
