// Command floodgate is the operator's tool for floodgate's rate limits:
// it checks policy files, compares two versions of them, replays access
// logs through a candidate configuration and renders a running service's
// demand report.
//
// It is a module of its own, so that programs which import the library
// never download what the command needs. Install it with
//
//	go install github.com/floodgate-go/floodgate/cmd/floodgate@latest
package main
