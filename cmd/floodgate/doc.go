// Command floodgate is the operator's tool for floodgate's rate limits:
// it checks policy files, compares two versions of them, replays access
// logs through a candidate configuration and renders a running service's
// demand report.
//
//	floodgate check [-strict] [-shared] FILE...          validate policy files and envoyproxy/ratelimit configs
//	floodgate diff [-force] [-max-step 0.30] OLD NEW     what changes; a cut above 30% in one step is refused
//	floodgate replay -config FILE [flags] LOG...         decide access logs offline through a candidate config
//	floodgate report URL|FILE                            render a recorder's demand report (shadow.Recorder.Handler)
//
// Every subcommand prints text, or JSON with -json, and describes its
// flags with -h. Exit codes: 0 success; 1 findings (a config error, a
// warning under -strict, a refused diff, a replay over its -max-refused);
// 2 a usage error or input that cannot be read.
//
// Replay reads nginx's combined format or any log_format (-log-format),
// Envoy's JSON access log and CSV of time,key[,cost]; it decides every
// line on the embedded memory store at the line's own time, through the
// same policy package and admission core as the HTTP middleware (or, for
// an envoyproxy/ratelimit config, through the rls service), and reports
// each policy as the demand recorder (package shadow) does. Several logs
// are merged by time.
//
// It is a module of its own, so that programs which import the library
// never download what the command needs. Install it with
//
//	go install github.com/floodgate-go/floodgate/cmd/floodgate@latest
package main
