module github.com/floodgate-go/floodgate/cmd/floodgate

go 1.26.0

require (
	github.com/envoyproxy/go-control-plane/envoy v1.40.0
	github.com/floodgate-go/floodgate v0.1.0
	github.com/floodgate-go/floodgate/rls v0.1.0
)
