package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/shadow"
)

const reportDoc = `Report renders the demand reports of a running service's recorder (the
JSON of shadow.Recorder.Handler, e.g. http://127.0.0.1:8089/debug/floodgate/demand)
or of a saved copy of that JSON (or of "floodgate replay -json"), per policy:
decisions and refusals, the demand distribution, the heaviest keys refused,
the recommendation and its notes.
`

func runReport(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("report", "[flags] URL|FILE", reportDoc, stderr)
	asJSON := fs.Bool("json", false, "print the reports as JSON (a list of shadow.Report)")
	name := fs.String("policy", "", "only this policy")
	timeout := fs.Duration("timeout", 10*time.Second, "the fetch's timeout")
	srcs, err := parseFlags(fs, args, stdout)
	if err != nil {
		return flagExit(err)
	}
	if len(srcs) != 1 {
		fmt.Fprintln(stderr, "floodgate report: want one URL or FILE")
		fs.Usage()
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	reps, err := loadReports(ctx, srcs[0], *name)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate report:", err)
		return exitUsage
	}
	if *asJSON {
		writeJSON(stdout, reps)
		return exitOK
	}
	if len(reps) == 0 {
		fmt.Fprintln(stdout, "no policy recorded")
	}
	for i, r := range reps {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printReport(stdout, r, false)
	}
	return exitOK
}

// loadReports reads the reports at src, a URL or a file, keeping the one
// named when name is set.
func loadReports(ctx context.Context, src, name string) ([]shadow.Report, error) {
	var b []byte
	var err error
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		b, err = fetch(ctx, src, name)
	} else {
		b, err = os.ReadFile(src)
	}
	if err != nil {
		return nil, err
	}
	reps, err := decodeReports(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	if name != "" {
		var keep []shadow.Report
		for _, r := range reps {
			if r.Policy == name {
				keep = append(keep, r)
			}
		}
		if len(keep) == 0 {
			return nil, fmt.Errorf("%s: no report of policy %q", src, name)
		}
		reps = keep
	}
	return reps, nil
}

// decodeReports reads a list of reports, or the "reports" of a replay's
// JSON.
func decodeReports(b []byte) ([]shadow.Report, error) {
	var reps []shadow.Report
	if err := json.Unmarshal(b, &reps); err == nil {
		return reps, nil
	}
	var replayed struct {
		Reports *[]shadow.Report `json:"reports"`
	}
	if err := json.Unmarshal(b, &replayed); err != nil || replayed.Reports == nil {
		return nil, fmt.Errorf("not a recorder's JSON report (a list of reports)")
	}
	return *replayed.Reports, nil
}

func fetch(ctx context.Context, src, name string) ([]byte, error) {
	u, err := url.Parse(src)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("format", "json")
	if name != "" {
		q.Set("policy", name)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", u.Redacted(), resp.Status, strings.TrimSpace(string(b[:min(len(b), 200)])))
	}
	return b, nil
}
