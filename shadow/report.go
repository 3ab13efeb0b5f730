package shadow

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Report is what a policy's recording shows at one moment: the demand
// distribution, the heaviest keys, and the recommendation with its
// evidence. Durations are in nanoseconds in JSON.
type Report struct {
	// Policy is the policy's name.
	Policy string `json:"policy"`
	// Window is the length of the windows demand is counted in.
	Window time.Duration `json:"window_ns"`
	// Limit is the policy's current limit per window (its quota), 0 when
	// unknown.
	Limit int64 `json:"limit"`
	// Since is the first observation, At the report's time, Observed the
	// time between them.
	Since    time.Time     `json:"since"`
	At       time.Time     `json:"at"`
	Observed time.Duration `json:"observed_ns"`
	// Windows is how many windows have ended since the first observation.
	Windows uint64 `json:"windows"`
	// Decisions, Units and Refused count every decision recorded, the
	// units they asked for (the offered demand, retries of refused
	// requests included), and the decisions the current limit refused
	// (denied, or would have in dry run); RefusedUnits counts the units of
	// those: Units - RefusedUnits were admitted.
	Decisions    uint64 `json:"decisions"`
	Units        uint64 `json:"units"`
	Refused      uint64 `json:"refused"`
	RefusedUnits uint64 `json:"refused_units"`
	// Keys is the estimated number of distinct keys (3.3% standard error).
	Keys float64 `json:"keys"`
	// KeyWindows is the estimated number of (key, window) pairs with
	// demand among the windows that ended: the samples of the distributions.
	KeyWindows float64 `json:"key_windows"`
	// DroppedWindows counts the windows whose key-windows were not counted
	// because the table of sampled keys overflowed in them: KeyWindows,
	// the distributions, the histogram and the recommendation's figures
	// leave those windows out (Notes says so).
	DroppedWindows uint64 `json:"dropped_windows"`
	// Notes explain what may make the figures partial or the
	// recommendation weak: dropped windows, too few keys for a
	// distribution, refusals that dominate the demand.
	Notes []string `json:"notes,omitempty"`
	// SampleRate is the fraction of the keys whose windows are measured
	// (1, 1/2, 1/4, ...: the table of sampled keys is bounded).
	SampleRate float64 `json:"sample_rate"`
	// Demand is the distribution of the units a key asks for in a window
	// (over the key-windows with demand); Burst that of the most units a
	// key asks for within an eighth of a window.
	Demand Quantiles `json:"demand"`
	Burst  Quantiles `json:"burst"`
	// Admitted is the distribution of the units of a key's window that the
	// limit did not refuse, over the key-windows with any: the demand that
	// was served (or would have been, in dry run).
	Admitted Quantiles `json:"admitted"`
	// Top is the heaviest keys, heaviest first.
	Top []Key `json:"top"`
	// Histogram is the demand distribution in bins of equal width on a
	// log scale, for charts.
	Histogram []Bin `json:"histogram"`
	// Recommendation is the recommended limit, or why there is none yet.
	Recommendation Recommendation `json:"recommendation"`
}

// Quantiles are points of a distribution, each within the sketch's
// relative error (1%) of the sampled keys' true value.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Key is one of the heaviest keys of a policy.
type Key struct {
	// Key is the key as the store saw it (up to 48 bytes), "" when the
	// Recorder hides keys; Hash identifies it in every case.
	Key  string `json:"key,omitempty"`
	Hash string `json:"hash"`
	// Peak is its largest demand in one window, Current its demand in the
	// current window, Total its units since it entered the top-K, Windows
	// the finished windows it asked in since then.
	Peak    uint64 `json:"peak"`
	Current uint64 `json:"current"`
	Total   uint64 `json:"total"`
	Windows uint64 `json:"windows"`
	// Refused counts its decisions that the current limit refused.
	Refused uint64 `json:"refused"`
	// Overcount bounds how much the counts of the window it entered the
	// top-K in (and so Total) may over-state: the estimate it entered with,
	// less its own request (Space-Saving). Peak counts that window by its
	// lower bound once it has ended, later windows exactly.
	Overcount uint64 `json:"overcount"`
	// AboveRecommendation tells whether its peak exceeds the recommended
	// limit.
	AboveRecommendation bool `json:"above_recommendation"`
}

// Bin is one bar of the demand histogram: the key-windows whose demand
// lies in [Low, High).
type Bin struct {
	Low        float64 `json:"low"`
	High       float64 `json:"high"`
	KeyWindows float64 `json:"key_windows"`
}

// Recommendation is the limit a policy's demand calls for: the chosen
// quantile of the per-key demand per window, plus headroom, and a burst
// from the largest bursts. It carries its evidence.
type Recommendation struct {
	// OK is false until the policy has been observed long enough (and has
	// demand); Reason then says why.
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
	// Limit is the recommended limit per window: ceil(Basis x (1 +
	// Headroom)). Burst is ceil(BurstBasis x (1 + Headroom)): the units a
	// token bucket should let through at once.
	Limit int64 `json:"limit"`
	Burst int64 `json:"burst"`
	// Current is the policy's limit per window now.
	Current int64 `json:"current"`
	// From is the demand Basis is a quantile of: "offered", every unit
	// asked (Report.Demand), or "admitted", the units the limit did not
	// refuse (Report.Admitted). It is "admitted" when the policy enforces
	// (see [Recorder.Follow]) and more than half of the units asked were
	// refused: refused requests that are retried count again as offered
	// demand, which then says more about the retries than about the
	// demand. The admitted demand is a lower bound of the demand, at most
	// what the current limit lets through in a window; BurstBasis, measured
	// on offered bursts, is then capped at Basis.
	From string `json:"from"`
	// FewKeys tells that the policy has fewer keys than 1/(1-Quantile) (20
	// for p95), by their estimated number (Keys): the quantile is then over those keys' own windows (their
	// variation in time, one key's for a per-service budget), not a
	// distribution across keys.
	FewKeys bool `json:"few_keys"`
	// Quantile and Basis: the quantile of the demand (From) per
	// key-window and its value; BurstQuantile and BurstBasis the same for bursts.
	Quantile      float64 `json:"quantile"`
	Basis         float64 `json:"basis"`
	BurstQuantile float64 `json:"burst_quantile"`
	BurstBasis    float64 `json:"burst_basis"`
	Headroom      float64 `json:"headroom"`
	// Evidence: how long and how much was observed.
	Observed   time.Duration `json:"observed_ns"`
	Windows    uint64        `json:"windows"`
	Keys       float64       `json:"keys"`
	KeyWindows float64       `json:"key_windows"`
	// What enforcing Limit would have refused: the key-windows whose
	// demand (From) exceeds it (and their fraction of those with demand),
	// and the units above it in those windows, estimated from the
	// distribution.
	KeyWindowsAbove float64 `json:"key_windows_above"`
	FractionAbove   float64 `json:"fraction_above"`
	UnitsAbove      float64 `json:"units_above"`
	// KeysAbove lists the heaviest keys (of the top-K) whose peak exceeds
	// Limit, as Key or Hash.
	KeysAbove []string `json:"keys_above"`
	// RefusedNow is how many decisions the current limit refused.
	RefusedNow uint64 `json:"refused_now"`
}

// String summarises the recommendation on one line.
func (r Recommendation) String() string {
	if !r.OK {
		return "no recommendation: " + r.Reason
	}
	s := fmt.Sprintf("limit %d (p%s %.1f +%.0f%%), burst %d, current %d; %.0f key-windows of %.0f above (%.2f%%), %d heavy keys above; observed %v over %d windows",
		r.Limit, strconv.FormatFloat(r.Quantile*100, 'f', -1, 64), r.Basis, r.Headroom*100, r.Burst, r.Current,
		r.KeyWindowsAbove, r.KeyWindows, r.FractionAbove*100, len(r.KeysAbove), r.Observed.Round(time.Second), r.Windows)
	if r.From == fromAdmitted {
		s += "; from admitted demand (refusals dominate)"
	}
	if r.FewKeys {
		s += fmt.Sprintf("; %.0f key(s): too few for a distribution", r.Keys)
	}
	return s
}

// Report returns the policy's report now, by the Recorder's clock.
func (d *Demand) Report() Report { return d.reportAt(d.rec.nanos()) }

// reportAt returns the policy's report at now (Unix nanoseconds). It
// counts the windows that ended before now.
func (d *Demand) reportAt(now int64) Report {
	d.flush(now)
	run, followed := d.rec.running(d.name, d.window)
	rep := Report{
		Policy: d.name, Window: time.Duration(d.window), Limit: d.currentLimit(run, followed),
		Since: time.Unix(0, d.start), At: time.Unix(0, now),
		Observed:   time.Duration(max(now-d.start, 0)),
		SampleRate: math.Ldexp(1, -int(d.level.Load())),
		Keys:       math.Round(d.keys.estimate()),
	}
	if n := d.spoiledN.Load(); n > 0 {
		rep.DroppedWindows = n
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d window(s) dropped: the table of sampled keys overflowed in them; key-windows, quantiles and the units above the recommendation leave them out", n))
	}
	if w := uint64(max(now, 0) / d.window); w > d.firstWin {
		rep.Windows = w - d.firstWin
	}
	for i := range d.stripes {
		dec := d.stripes[i].decisions.Load()
		rep.Decisions += dec
		rep.Units += dec + d.stripes[i].extra.Load()
		rep.Refused += d.stripes[i].denied.Load()
		rep.RefusedUnits += d.stripes[i].refused.Load()
	}
	dem, bur, adm := d.demand.freeze(), d.burst.freeze(), d.admitted.freeze()
	rep.KeyWindows = float64(dem.total)
	rep.Demand = quantiles(dem)
	rep.Burst = quantiles(bur)
	rep.Admitted = quantiles(adm)
	rep.Histogram = histogram(dem, 40)

	rec := d.recommend(&rep, dem, bur, adm, followed && run.dryRun)
	rep.Notes = append(rep.Notes, demandNotes(rep, rec, followed)...)
	rep.Top = d.topKeys(rec, uint64(max(now, 0)/d.window))
	for _, k := range rep.Top {
		if k.AboveRecommendation {
			rec.KeysAbove = append(rec.KeysAbove, cmp.Or(k.Key, k.Hash))
		}
	}
	rep.Recommendation = rec
	return rep
}

// Demand kinds a recommendation is taken from (Recommendation.From).
const (
	fromOffered  = "offered"
	fromAdmitted = "admitted"
)

// recommend returns the recommendation for a report (its evidence filled
// in) from the offered demand, bursts and admitted demand; dry tells that
// the policy runs in dry run.
func (d *Demand) recommend(rep *Report, dem, bur, adm frozen, dry bool) Recommendation {
	cfg := d.rec.cfg
	rec := Recommendation{
		Current: rep.Limit, From: fromOffered, Quantile: cfg.Quantile, BurstQuantile: cfg.BurstQuantile, Headroom: cfg.Headroom,
		Observed: rep.Observed, Windows: rep.Windows, Keys: rep.Keys, KeyWindows: rep.KeyWindows, RefusedNow: rep.Refused,
		FewKeys: rep.Keys < minKeys(cfg.Quantile),
	}
	basis := dem
	if refusalsDominate(*rep) && !dry {
		basis, rec.From = adm, fromAdmitted
	}
	switch {
	case rep.Observed < cfg.MinObservation:
		rec.Reason = fmt.Sprintf("observed %v of the %v required", rep.Observed.Round(time.Millisecond), cfg.MinObservation)
	case dem.total == 0:
		rec.Reason = "no window with demand has ended yet"
	case basis.total == 0:
		rec.Reason = "refusals dominate and no window with admitted demand has ended yet"
	default:
		rec.OK = true
		rec.Basis = basis.quantile(cfg.Quantile)
		rec.BurstBasis = bur.quantile(cfg.BurstQuantile)
		if rec.From == fromAdmitted {
			rec.BurstBasis = min(rec.BurstBasis, rec.Basis)
		}
		rec.Limit = max(int64(math.Ceil(rec.Basis*(1+cfg.Headroom)-1e-9)), 1)
		rec.Burst = max(int64(math.Ceil(rec.BurstBasis*(1+cfg.Headroom)-1e-9)), 1)
		rec.KeyWindowsAbove, rec.UnitsAbove = basis.above(float64(rec.Limit))
		rec.FractionAbove = rec.KeyWindowsAbove / float64(basis.total)
	}
	return rec
}

// minKeys is the fewest keys for which a q-quantile across keys means
// something: 1/(1-q), 20 for p95.
func minKeys(q float64) float64 { return math.Ceil(1/(1-q) - 1e-9) }

// refusalsDominate tells whether more than half of the units asked were
// refused.
func refusalsDominate(rep Report) bool { return rep.RefusedUnits > rep.Units-rep.RefusedUnits }

// demandNotes are the notes on what the recommendation's demand may not
// show: too few keys, refusals that dominate.
func demandNotes(rep Report, rec Recommendation, followed bool) []string {
	var notes []string
	if rec.FewKeys {
		notes = append(notes, fmt.Sprintf("%.0f key(s), fewer than the %.0f that a p%s across keys needs: the quantiles are over these keys' own windows, not a distribution of keys",
			rep.Keys, minKeys(rec.Quantile), strconv.FormatFloat(rec.Quantile*100, 'f', -1, 64)))
	}
	if !refusalsDominate(rep) {
		return notes
	}
	share := fmt.Sprintf("refusals dominate: %d of the %d units asked (%.0f%%) were refused", rep.RefusedUnits, rep.Units, 100*float64(rep.RefusedUnits)/float64(rep.Units))
	switch {
	case rec.From == fromOffered:
		notes = append(notes, share+"; the policy runs in dry run, so no caller was refused and the recommendation is taken from the offered demand")
	case followed:
		notes = append(notes, share+"; retried refusals count again as offered demand, so the recommendation is taken from the admitted demand, a lower bound of the demand")
	default:
		notes = append(notes, share+"; the recommendation is taken from the admitted demand, a lower bound of the demand (the policy is taken as enforcing: Recorder.Follow its Live to tell a dry run)")
	}
	return notes
}

// currentLimit is the policy's running limit in a followed Live (run,
// when followed), else the limit of its latest decision that told one.
func (d *Demand) currentLimit(run runningPolicy, followed bool) int64 {
	if followed && run.sameWindow {
		return run.quota
	}
	return d.limit.Load()
}

func quantiles(f frozen) Quantiles {
	return Quantiles{P50: f.quantile(0.5), P90: f.quantile(0.9), P95: f.quantile(0.95), P99: f.quantile(0.99), Max: float64(f.max)}
}

// histogram merges the sketch's bins into at most n of equal log width
// from the smallest value seen to the largest.
func histogram(f frozen, n int) []Bin {
	lo, hi := -1, -1
	for i, c := range f.bins {
		if c > 0 {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	if lo < 0 {
		return nil
	}
	per := max((hi-lo+1+n-1)/n, 1)
	var out []Bin
	for i := lo; i <= hi; i += per {
		b := Bin{Low: edge(i), High: edge(min(i+per, hi+1))}
		for j := i; j < min(i+per, hi+1); j++ {
			b.KeyWindows += float64(f.bins[j])
		}
		out = append(out, b)
	}
	out[len(out)-1].High = math.Max(out[len(out)-1].High, float64(f.max))
	return out
}

// edge is the lower edge of sketch bin i: values above gamma^(i-1).
func edge(i int) float64 {
	if i == 0 {
		return 1
	}
	return math.Pow(sketchGamma, float64(i-1))
}

func (d *Demand) topKeys(rec Recommendation, w uint64) []Key {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Key
	for i := range d.top {
		e := &d.top[i]
		id := d.ids[i].Load()
		if id == 0 {
			continue
		}
		ew, cnt := e.win.Load(), e.cnt.Load()
		k := Key{
			Key: string(e.label[:e.labelN]), Hash: fmt.Sprintf("%016x", id),
			Peak: e.lower(), Total: e.total.Load() + cnt, Windows: e.windows.Load(),
			Refused: e.denied.Load(), Overcount: e.over.Load(),
		}
		if ew == w {
			k.Current = cnt
		} else if cnt > 0 {
			k.Windows++ // its last window has ended
			if ew == e.entry.Load() {
				// It ended as the window the key entered in: its peak
				// counts it by its lower bound, as a later decision would.
				k.Peak = max(e.peak.Load(), cnt-min(cnt, k.Overcount))
			}
		}
		k.AboveRecommendation = rec.OK && k.Peak > uint64(rec.Limit)
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Key) int { return cmp.Or(cmp.Compare(b.Peak, a.Peak), cmp.Compare(a.Hash, b.Hash)) })
	return out
}

// Reports returns the report of every recorded policy, by name.
func (r *Recorder) Reports() []Report {
	r.mu.Lock()
	ds := make([]*Demand, 0, len(r.byName))
	for _, d := range r.byName {
		ds = append(ds, d)
	}
	r.mu.Unlock()
	slices.SortFunc(ds, func(a, b *Demand) int { return cmp.Compare(a.name, b.name) })
	now := r.nanos()
	out := make([]Report, len(ds))
	for i, d := range ds {
		out[i] = d.reportAt(now)
	}
	return out
}
