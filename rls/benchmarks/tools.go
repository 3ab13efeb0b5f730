//go:build tools

package benchmarks

// The reference, which cmd/compare builds (go build
// github.com/envoyproxy/ratelimit/src/service_cmd) at the version go.mod
// pins.
import _ "github.com/envoyproxy/ratelimit/src/service_cmd/runner"

// And floodgate-rls, built from the rls module next door.
import _ "github.com/floodgate-go/floodgate/rls"
