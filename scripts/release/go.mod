module github.com/floodgate-go/floodgate/scripts/release

go 1.26.0

require golang.org/x/mod v0.40.0
