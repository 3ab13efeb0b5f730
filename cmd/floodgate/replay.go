package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
)

const replayDoc = `Replay decides every line of the access logs LOG... ("-": standard input)
through the candidate config -config (a policy file, or an envoyproxy/ratelimit
config), offline, on the embedded memory store, each line at its own
timestamp: a what-if of that config on real traffic. It reports per policy what the demand recorder (package shadow)
would show after that traffic: decisions and would-be refusals, the heaviest
keys and their refusals, the distribution of per-key demand per window, and
the recommended limit. Several logs (of several servers, or a log and its
rotations) are merged by time: every line is decided in the order of the
timestamps, whatever the order of the files. Within one log lines are taken
in order: a line earlier than one before it is decided at the latest time
seen, and counted in a note.

Formats (-format):
  nginx    nginx's combined log_format, or the one given by -log-format
           (time from $time_local, $time_iso8601 or $msec)
  envoy    one JSON object per line (Envoy's json_format access log as Envoy
           Gateway and Istio write it), time from "start_time" (RFC 3339)
  csv      time,key[,cost]: time in Unix seconds (1700000000.25) or RFC 3339

Which policy decides a line (one of):
  -policy NAME       every line's key (-key) on the named policy
  -descriptor D      the config's rules match the descriptors built per line,
                     as the HTTP middleware does: "remote_address=$remote_addr"
                     (repeat for several descriptors; key=value,key=value for
                     nested entries; values are text and $fields)
  (neither)          every line's key on its plan: its override, else the
                     default plan (the config needs one of them)
An envoyproxy/ratelimit config as -config is asked through -descriptor, as
Envoy asks the rls service, in the config's domain, with a line's cost as
hits_addend; a refused line names the descriptor refused, and the refusals
of shadow_mode limits show in their reports only (the service answers OK).
-key builds a line's key from its fields: default $remote_addr (nginx),
$downstream_remote_address (envoy; an address field loses its :port), $key
(csv). -cost reads a line's cost (default 1; csv: its third column).
Leased policies are decided directly on their one bucket.
`

type replayOpts struct {
	config, format, logFormat, key, cost, policy, verdicts string
	descriptors                                            multiFlag
	minObs                                                 time.Duration
	topK                                                   int
	hideKeys, asJSON                                       bool
	maxRefused                                             float64
}

// replayResult is what a replay found.
type replayResult struct {
	Config string   `json:"config"`
	Logs   []string `json:"logs"`
	Mode   string   `json:"mode"`
	// Lines read; Decided went through a policy; Refused were refused by
	// an enforcing policy; WouldRefuse admitted but refused by a dry-run
	// policy; Unlimited matched no policy; Bad could not be read or decided.
	Lines       uint64    `json:"lines"`
	Decided     uint64    `json:"decided"`
	Refused     uint64    `json:"refused"`
	WouldRefuse uint64    `json:"would_refuse"`
	Unlimited   uint64    `json:"unlimited"`
	Bad         uint64    `json:"bad"`
	BadSamples  []finding `json:"bad_samples,omitempty"`
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	// Elapsed is the replay's wall time.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Notes say what limits the replay's accuracy.
	Notes    []string        `json:"notes,omitempty"`
	Policies []policyReplay  `json:"policies"`
	Reports  []shadow.Report `json:"reports"`
}

// policyReplay is a policy's line in the replay: its config and whether
// any line reached it.
type policyReplay struct {
	Name   string `json:"name"`
	Policy string `json:"policy"`
	DryRun bool   `json:"dry_run"`
	Seen   bool   `json:"seen"`
}

func runReplay(args []string, stdout, stderr io.Writer) int {
	var o replayOpts
	fs := newFlags("replay", "--config FILE [flags] LOG...", replayDoc, stderr)
	fs.StringVar(&o.config, "config", "", "the candidate policy file or envoyproxy/ratelimit config (required)")
	fs.StringVar(&o.format, "format", "nginx", "the logs' format: nginx, envoy or csv")
	fs.StringVar(&o.logFormat, "log-format", nginxCombined, "the nginx log_format the logs were written with")
	fs.StringVar(&o.key, "key", "", "a line's key, from its fields (default by format)")
	fs.StringVar(&o.cost, "cost", "", "a line's cost, a field (default 1; csv: $cost)")
	fs.StringVar(&o.policy, "policy", "", "decide every line's key on this policy")
	fs.Var(&o.descriptors, "descriptor", "a request descriptor built from each line (repeatable)")
	fs.StringVar(&o.verdicts, "verdicts", "", "write every line's verdict to this CSV file (file,line,time_ns,key,verdict,policy)")
	fs.DurationVar(&o.minObs, "min-observation", time.Hour, "the observation a recommendation needs (the recorder's MinObservation)")
	fs.IntVar(&o.topK, "top", 16, "how many of the heaviest keys each policy keeps (1..64)")
	fs.BoolVar(&o.hideKeys, "hide-keys", false, "show no key, only its hash (keys that are credentials)")
	fs.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	fs.Float64Var(&o.maxRefused, "max-refused", -1, "exit 1 when more than this fraction of the decided lines is refused (0.01: 1%)")
	logs, err := parseFlags(fs, args, stdout)
	if err != nil {
		return flagExit(err)
	}
	if o.config == "" || len(logs) == 0 {
		fmt.Fprintln(stderr, "floodgate replay: want -config FILE and at least one LOG")
		fs.Usage()
		return exitUsage
	}
	res, err := replay(context.Background(), o, logs, progressTo(stderr))
	if err != nil {
		fmt.Fprintln(stderr, "floodgate replay:", err)
		return exitUsage
	}
	if o.asJSON {
		writeJSON(stdout, res)
	} else {
		printReplay(stdout, res)
	}
	if res.Decided == 0 {
		fmt.Fprintln(stderr, "floodgate replay: no line was decided")
		return exitUsage
	}
	if o.maxRefused >= 0 && float64(res.Refused+res.WouldRefuse) > o.maxRefused*float64(res.Decided) {
		return exitFindings
	}
	return exitOK
}

// logClock is the time of the line being replayed.
type logClock struct{ ns atomic.Int64 }

func (c *logClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// replayer holds a replay's state.
type replayer struct {
	o      replayOpts
	clk    *logClock
	rec    *shadow.Recorder
	live   *policy.Live
	set    *policy.Set
	dryRun map[string]bool
	// newParser makes the parser of one log (a parser caches the last
	// timestamp it read); nfields is the size of a record's vals.
	newParser func() parser
	nfields   int
	// r is the record of the line being decided.
	r          *record
	key        tmpl
	cost       int // field index, -1 for 1
	descs      []descTmpl
	decideLine func(ctx context.Context, key string, n int) (verdict, string, error)
	res        replayResult
	verdict    *bufio.Writer
	prog       *progress
	// reused buffers
	keyBuf []byte
	dbuf   []byte
	ds     []middleware.Descriptor // per -descriptor, reused
	dsOut  []middleware.Descriptor // the line's descriptors
	checks []floodgate.Check
	core   *admit.Core
	// backwards counts the lines earlier than a line before them in
	// their log.
	backwards int64
}

type verdict uint8

const (
	vAllowed verdict = iota
	vRefused
	vWould
	vUnlimited
)

var verdictNames = [...]string{"allowed", "refused", "would_refuse", "unlimited"}

// newReplayer compiles the candidate config and the line mapping.
func newReplayer(o replayOpts) (*replayer, error) {
	f, err := loadConfig(o.config, "")
	if err != nil {
		return nil, err
	}
	rp := &replayer{o: o, clk: &logClock{}, dryRun: map[string]bool{}, cost: -1}
	mem, err := memstore.New(memstore.WithClock(rp.clk), memstore.WithSweepInterval(0))
	if err != nil {
		return nil, err
	}
	rp.rec, err = shadow.New(shadow.Config{Clock: rp.clk, MinObservation: o.minObs, TopK: o.topK, HideKeys: o.hideKeys})
	if err != nil {
		return nil, err
	}
	if err := rp.compile(f, mem); err != nil {
		rp.rec.Close()
		return nil, err
	}
	return rp, nil
}

// compile runs the config on the recorded store and sets the line mapping.
func (rp *replayer) compile(f *configFile, mem *memstore.Store) error {
	recorded, err := rp.rec.Store(mem)
	if err != nil {
		return err
	}
	if err := rp.mapping(); err != nil {
		return err
	}
	if f.Kind == kindEnvoy {
		return rp.compileEnvoy(f, recorded)
	}
	cfg := f.Policy
	for i := range cfg.Policies {
		// A lease decides on the one global bucket's tokens: replayed on
		// that bucket directly.
		p := &cfg.Policies[i]
		p.Leased, p.LeaseRefresh = false, 0
		rp.dryRun[p.Name] = p.DryRun
		rp.res.Policies = append(rp.res.Policies, policyReplay{Name: p.Name, Policy: p.String(), DryRun: p.DryRun})
	}
	if rp.live, err = policy.NewLive(cfg, recorded); err != nil {
		return err
	}
	rp.rec.Follow(rp.live)
	rp.set = rp.live.Set()
	return rp.decider(cfg)
}

// mapping sets how a line becomes a decision: its parser, key, cost, and
// the policy (or rules) deciding it.
func (rp *replayer) mapping() error {
	o := rp.o
	var fs fields
	key := o.key
	if key == "" {
		key = map[string]string{"nginx": "$remote_addr", "envoy": "$downstream_remote_address", "csv": "$key"}[o.format]
	}
	var err error
	if rp.key, err = compileTmpl(key, &fs); err != nil {
		return fmt.Errorf("-key: %w", err)
	}
	cost := o.cost
	if cost == "" && o.format == "csv" {
		cost = "$cost"
	}
	if cost != "" {
		if len(cost) < 2 || cost[0] != '$' {
			return fmt.Errorf("-cost %q: want a $field", cost)
		}
		rp.cost = fs.index(cost[1:])
	}
	for _, d := range o.descriptors {
		dt, err := compileDescriptor(d, &fs)
		if err != nil {
			return fmt.Errorf("-descriptor: %w", err)
		}
		rp.descs = append(rp.descs, dt)
	}
	switch o.format {
	case "nginx":
		var np *nginxParser
		if np, err = newNginxParser(o.logFormat, &fs); err == nil && np.timeVar != "msec" {
			rp.res.Notes = append(rp.res.Notes, fmt.Sprintf("the log's times are whole seconds ($%s): every line of a second is decided at its start, so bursts within a second look larger than they were; add $msec to the log_format", np.timeVar))
		}
		if err == nil {
			err = fs.within(np.vars(), "the log format")
		}
		rp.newParser = func() parser { c := *np; c.ts = tsCache{}; return &c }
	case "envoy":
		rp.newParser = func() parser { return &jsonParser{fs: &fs, timeKey: "start_time"} }
	case "csv":
		err = fs.within([]string{"key", "cost"}, "a CSV line (time,key[,cost])")
		rp.newParser = func() parser { return &csvParser{key: fs.lookup("key"), cost: fs.lookup("cost")} }
	default:
		err = fmt.Errorf("-format %q: want nginx, envoy or csv", o.format)
	}
	if err != nil {
		return err
	}
	rp.nfields = len(fs.names)
	return nil
}

func (rp *replayer) decider(cfg policy.Config) error {
	switch {
	case len(rp.descs) > 0 && rp.o.policy != "":
		return errors.New("-policy and -descriptor exclude each other")
	case len(rp.descs) > 0:
		rp.res.Mode = "descriptors"
		rp.core = admit.NewDynamic(admit.Config{})
		rp.decideLine = rp.byDescriptors
	case rp.o.policy != "":
		lim, ok := rp.set.Limiter(rp.o.policy)
		if !ok {
			return fmt.Errorf("-policy %q: no such policy in %s", rp.o.policy, rp.o.config)
		}
		rp.res.Mode = "policy " + rp.o.policy
		rp.decideLine = func(ctx context.Context, key string, n int) (verdict, string, error) {
			return rp.take(ctx, lim, key, n)
		}
	default:
		if cfg.DefaultPlan == "" && len(cfg.Overrides) == 0 {
			return fmt.Errorf("%s has no default_plan nor overrides to place keys on: give -policy NAME or -descriptor", rp.o.config)
		}
		rp.res.Mode = "plans"
		rp.decideLine = func(ctx context.Context, key string, n int) (verdict, string, error) {
			lim, err := rp.set.Plan(ctx, key)
			if err != nil || lim == nil {
				return vUnlimited, "", err
			}
			return rp.take(ctx, lim, key, n)
		}
	}
	return nil
}

func (rp *replayer) take(ctx context.Context, lim *store.Limiter, key string, n int) (verdict, string, error) {
	d, err := lim.Take(ctx, key, n)
	switch {
	case errors.Is(err, floodgate.ErrInvalidCost) || errors.Is(err, floodgate.ErrInvalidKey):
		// Never admissible (a cost above the capacity, a key the store
		// refuses): the middleware answers 429, so replay refuses it.
		if rp.dryRun[lim.Name()] {
			return vWould, lim.Name(), nil
		}
		return vRefused, lim.Name(), nil
	case err != nil:
		return vAllowed, lim.Name(), err
	case d.Allowed:
		return vAllowed, lim.Name(), nil
	case rp.dryRun[lim.Name()]:
		return vWould, lim.Name(), nil
	}
	return vRefused, lim.Name(), nil
}

// byDescriptors decides a line as the HTTP middleware decides a request:
// the rules match its descriptors to checks, the admission core decides the
// enforcing ones and, when they admit, the dry-run ones.
func (rp *replayer) byDescriptors(ctx context.Context, _ string, n int) (verdict, string, error) {
	rp.dbuf = rp.dbuf[:0]
	for len(rp.ds) < len(rp.descs) {
		rp.ds = append(rp.ds, nil)
	}
	descs := rp.dsOut[:0]
	for i, dt := range rp.descs {
		d, buf, ok := dt.render(rp.ds[i], rp.dbuf, rp.r)
		rp.ds[i], rp.dbuf = d, buf
		if ok {
			descs = append(descs, d) // a descriptor without its field: none
		}
	}
	rp.dsOut = descs
	checks, enf, err := rp.set.Match(ctx, descs, n, rp.checks[:0])
	if err != nil {
		return vAllowed, "", err
	}
	rp.checks = checks
	if len(checks) == 0 {
		return vUnlimited, "", nil
	}
	v := rp.core.DecideChecks(ctx, checks[:enf], checks[enf:], floodgate.Event{}, 0)
	switch v.Kind {
	case admit.Admit:
		for _, c := range checks[enf:] {
			if !c.Decision.Allowed {
				return vWould, limName(c.Limiter), nil
			}
		}
		return vAllowed, limName(checks[0].Limiter), nil
	case admit.Unavailable:
		return vAllowed, "", v.Err
	}
	// Refused: by a limit (Deny), or because no limit can ever admit it
	// (NeverFits: a cost above a capacity, a key the store refuses), which
	// the middleware answers with 429 too.
	for _, c := range checks[:enf] {
		if !c.Decision.Allowed {
			return vRefused, limName(c.Limiter), nil
		}
	}
	return vRefused, limName(checks[0].Limiter), nil
}

func limName(l floodgate.Limiter) string {
	if n, ok := l.(interface{ Name() string }); ok {
		return n.Name()
	}
	return ""
}

// replay runs the whole replay.
func replay(ctx context.Context, o replayOpts, logs []string, prog *progress) (replayResult, error) {
	rp, err := newReplayer(o)
	if err != nil {
		return replayResult{}, err
	}
	defer rp.rec.Close()
	rp.res.Config, rp.res.Logs = o.config, logs
	if o.verdicts != "" {
		f, err := os.Create(o.verdicts)
		if err != nil {
			return replayResult{}, err
		}
		defer f.Close()
		rp.verdict = bufio.NewWriterSize(f, 1<<16)
		rp.verdict.WriteString("file,line,time_ns,key,verdict,policy\n")
	}
	rp.prog = prog
	if prog != nil {
		prog.start(logs)
	}
	start := time.Now()
	if err := rp.merge(ctx, logs); err != nil {
		return replayResult{}, err
	}
	rp.res.Elapsed = time.Since(start)
	if prog != nil {
		prog.done()
	}
	if rp.verdict != nil {
		if err := rp.verdict.Flush(); err != nil {
			return replayResult{}, err
		}
	}
	if rp.backwards > 0 {
		rp.res.Notes = append(rp.res.Notes, fmt.Sprintf("%d line(s) earlier than a line before them in their log: decided as at the latest time seen", rp.backwards))
	}
	rp.reports()
	return rp.res, nil
}

// reports takes every policy's report at the end of the logs.
func (rp *replayer) reports() {
	rp.clk.ns.Store(rp.res.To.UnixNano() + 1) // the recorder reports as of the end of the logs
	rp.res.Reports = []shadow.Report{}
	for i := range rp.res.Policies {
		p := &rp.res.Policies[i]
		d, ok := rp.rec.Demand(p.Name)
		if !ok {
			continue
		}
		p.Seen = true
		rp.res.Reports = append(rp.res.Reports, d.Report())
	}
}

// decide replays the line src has read.
func (rp *replayer) decide(ctx context.Context, src *source) {
	rp.r = &src.r
	cost, err := rp.lineCost()
	if err != nil {
		rp.bad(src.path, src.n, err)
		return
	}
	kb, ok := rp.key.render(rp.keyBuf[:0], rp.r)
	rp.keyBuf = kb
	if !ok && len(rp.descs) == 0 {
		// No key (a header the request did not have): no keyed limit
		// applies to it.
		rp.res.Unlimited++
		return
	}
	rp.span(rp.r.t)
	rp.clk.ns.Store(rp.r.t)
	key := string(kb)
	v, pol, err := rp.decideLine(ctx, key, cost)
	if err != nil {
		rp.bad(src.path, src.n, err)
		return
	}
	rp.count(v)
	if rp.verdict != nil {
		rp.writeVerdict(src.path, src.n, key, v, pol)
	}
}

// lineCost returns the cost of the line just parsed (1 without -cost).
func (rp *replayer) lineCost() (int, error) {
	if rp.cost < 0 || len(rp.r.vals[rp.cost]) == 0 {
		return 1, nil
	}
	c, err := strconv.Atoi(string(rp.r.vals[rp.cost]))
	if err != nil || c < 1 {
		return 0, fmt.Errorf("cost %q: want an integer >= 1", rp.r.vals[rp.cost])
	}
	return c, nil
}

// span widens the time the logs cover to t.
func (rp *replayer) span(t int64) {
	if rp.res.From.IsZero() || t < rp.res.From.UnixNano() {
		rp.res.From = time.Unix(0, t)
	}
	if t > rp.res.To.UnixNano() {
		rp.res.To = time.Unix(0, t)
	}
}

func (rp *replayer) count(v verdict) {
	switch v {
	case vUnlimited:
		rp.res.Unlimited++
		return
	case vRefused:
		rp.res.Refused++
	case vWould:
		rp.res.WouldRefuse++
	}
	rp.res.Decided++
}

func (rp *replayer) writeVerdict(path string, n int, key string, v verdict, pol string) {
	w := rp.verdict
	w.WriteString(path)
	w.WriteByte(',')
	w.WriteString(strconv.Itoa(n))
	w.WriteByte(',')
	w.WriteString(strconv.FormatInt(rp.r.t, 10))
	w.WriteByte(',')
	w.WriteString(csvField(key))
	w.WriteByte(',')
	w.WriteString(verdictNames[v])
	w.WriteByte(',')
	w.WriteString(pol)
	w.WriteByte('\n')
}

// csvField quotes a field holding a comma or a quote.
func csvField(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' || s[i] == '"' || s[i] == '\n' {
			return strconv.Quote(s)
		}
	}
	return s
}

func (rp *replayer) bad(path string, n int, err error) {
	rp.res.Bad++
	if len(rp.res.BadSamples) < 5 {
		rp.res.BadSamples = append(rp.res.BadSamples, finding{File: path, Line: n, Msg: err.Error()})
	}
}

func printReplay(w io.Writer, res replayResult) {
	span := res.To.Sub(res.From)
	fmt.Fprintf(w, "replayed %s lines of %s (%v of traffic, %s to %s) through %s (%s) in %v (%s lines/s)\n",
		count(res.Lines), strings.Join(res.Logs, ", "), span.Round(time.Millisecond),
		res.From.UTC().Format(time.RFC3339), res.To.UTC().Format(time.RFC3339), res.Config, res.Mode,
		res.Elapsed.Round(time.Millisecond), count(uint64(float64(res.Lines)/max(res.Elapsed.Seconds(), 1e-9))))
	fmt.Fprintf(w, "decided %s: refused %s (%s), would refuse in dry run %s (%s); no policy: %s; unreadable: %s\n",
		count(res.Decided), count(res.Refused), percent(res.Refused, res.Decided),
		count(res.WouldRefuse), percent(res.WouldRefuse, res.Decided), count(res.Unlimited), count(res.Bad))
	for _, b := range res.BadSamples {
		fmt.Fprintln(w, " ", b)
	}
	for _, n := range res.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	dry := map[string]bool{}
	for _, p := range res.Policies {
		dry[p.Name] = p.DryRun
	}
	for _, r := range res.Reports {
		fmt.Fprintln(w)
		printReport(w, r, dry[r.Policy])
	}
	for _, p := range res.Policies {
		if !p.Seen {
			fmt.Fprintf(w, "\n%s: no line reached it\n", p.Policy)
		}
	}
}
