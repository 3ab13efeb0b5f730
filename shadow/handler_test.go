package shadow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/shadow"
)

// reportServer records a small workload (1,000 log-normal keys, 2 abusers)
// for "api" and serves the Recorder's handler on a real loopback server.
func reportServer(t *testing.T) (*httptest.Server, shadow.Report) {
	t.Helper()
	const win = time.Second
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: 3 * win})
	require.NoError(t, err)
	t.Cleanup(func() { rec.Close() })
	d, err := rec.Track("api", win, 60)
	require.NoError(t, err)
	wl := newWorkload(7, 1000, 2, 20, 0.6)
	start := (clk.Now().UnixNano()/int64(win) + 1) * int64(win)
	evs := wl.window(win)
	for k := range 5 {
		for _, ev := range evs {
			d.ObserveAt(start+int64(k)*int64(win)+ev.at, wl.keys[ev.key], 1, wl.counts[ev.key] > 60)
		}
	}
	clk.Set(start + 5*int64(win))
	srv := httptest.NewServer(rec.Handler())
	t.Cleanup(srv.Close)
	return srv, d.Report()
}

func TestHandlerJSON(t *testing.T) {
	srv, want := reportServer(t)
	res, err := http.Get(srv.URL + "/?format=json")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	var reps []shadow.Report
	require.NoError(t, json.NewDecoder(res.Body).Decode(&reps))
	require.Len(t, reps, 1)
	got := reps[0]
	assert.Equal(t, "api", got.Policy)
	assert.EqualValues(t, 60, got.Limit)
	require.True(t, got.Recommendation.OK, got.Recommendation.Reason)
	assert.Equal(t, want.Recommendation.Limit, got.Recommendation.Limit)
	assert.Equal(t, want.Demand, got.Demand)
	assert.Subset(t, got.Recommendation.KeysAbove, []string{"abuser-0", "abuser-1"})
	assert.NotEmpty(t, got.Histogram)

	// The Accept header chooses too; an unknown policy is a 404; only
	// GET and HEAD are served.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Header.Set("Accept", "application/json")
	res2, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res2.Body.Close()
	assert.Equal(t, "application/json", res2.Header.Get("Content-Type"))
	res3, err := http.Get(srv.URL + "/?policy=nope")
	require.NoError(t, err)
	res3.Body.Close()
	assert.Equal(t, http.StatusNotFound, res3.StatusCode)
	res4, err := http.Post(srv.URL+"/", "text/plain", nil)
	require.NoError(t, err)
	res4.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res4.StatusCode)
}

// chromiumPath finds the browser. Missing, the test fails: scripts/test.sh
// installs it (Debian's chromium package), as CI runs it.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: install it (apt-get install -y chromium; scripts/test.sh does) to render the report page")
	return ""
}

func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, chromiumPath(t), append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "chromium: %s", stderr.String())
	return out
}

// The report page rendered by a real headless chromium: the DOM holds the
// SVG chart with its bars and its two markers and the report's numbers,
// and the screenshot shows the bars and the markers' colours.
func TestReportPageInChromium(t *testing.T) {
	srv, rep := reportServer(t)
	rec := rep.Recommendation
	require.True(t, rec.OK, rec.Reason)

	dom := string(chromium(t, "--dump-dom", srv.URL+"/"))
	assert.Contains(t, dom, `<svg class="demand-chart" data-policy="api"`)
	bars := regexp.MustCompile(`<rect class="bar"`).FindAllStringIndex(dom, -1)
	assert.Equal(t, len(rep.Histogram), len(bars), "one bar per histogram bin")
	assert.Regexp(t, `<line class="current-limit"`, dom)
	assert.Regexp(t, `<line class="recommendation"`, dom)
	assert.Contains(t, dom, ">current 60<")
	assert.Contains(t, dom, ">recommended "+strconv.FormatInt(rec.Limit, 10)+"<")
	assert.Contains(t, dom, `<td class="rec-limit">`+strconv.FormatInt(rec.Limit, 10)+`</td>`)
	assert.Contains(t, dom, `<td class="rec-burst">`+strconv.FormatInt(rec.Burst, 10)+`</td>`)
	assert.Contains(t, dom, `<td class="p95">`+fmt.Sprint(shadowNum(rep.Demand.P95))+`</td>`)
	assert.Contains(t, dom, `<td class="current">60</td>`)
	assert.Contains(t, dom, `<td class="units-offered">`+fmt.Sprint(rep.Units)+`</td>`)
	assert.Contains(t, dom, `<td class="units-admitted">`+fmt.Sprint(rep.Units-rep.RefusedUnits)+`</td>`)
	assert.Contains(t, dom, `<td class="admitted-p95">`+fmt.Sprint(shadowNum(rep.Admitted.P95))+`</td>`)
	assert.Contains(t, dom, "abuser-0")
	assert.NotContains(t, dom, "<script")

	shot := filepath.Join(t.TempDir(), "report.png")
	if p := os.Getenv("SHADOW_SHOT"); p != "" {
		shot = p
	}
	chromium(t, "--screenshot="+shot, "--window-size=1000,900", "--hide-scrollbars", srv.URL+"/")
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	count := map[string]int{}
	colours := map[string][3]uint32{"bar": {0x5d, 0xad, 0xe2}, "current": {0xc0, 0x39, 0x2b}, "recommendation": {0x1e, 0x84, 0x49}}
	bnd := img.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y++ {
		for x := bnd.Min.X; x < bnd.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			for name, c := range colours {
				if near(r>>8, c[0]) && near(g>>8, c[1]) && near(b>>8, c[2]) {
					count[name]++
				}
			}
		}
	}
	t.Logf("pixels: %v", count)
	assert.Greater(t, count["bar"], 2000, "the bars are drawn")
	assert.Greater(t, count["current"], 100, "the current limit is marked")
	assert.Greater(t, count["recommendation"], 100, "the recommendation is marked")
}

func near(a, b uint32) bool { return a+12 >= b && b+12 >= a }

// shadowNum is how the page prints a number (the package's num).
func shadowNum(v float64) string {
	if v >= 100 {
		v = float64(int64(v + 0.5))
	}
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// The page with no policy, and with a policy that has no recommendation
// yet, says so.
func TestHandlerEarly(t *testing.T) {
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk})
	require.NoError(t, err)
	defer rec.Close()
	srv := httptest.NewServer(rec.Handler())
	defer srv.Close()
	get := func() string {
		res, err := http.Get(srv.URL + "/")
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		assert.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
		var b bytes.Buffer
		_, err = b.ReadFrom(res.Body)
		require.NoError(t, err)
		return b.String()
	}
	assert.Contains(t, get(), "No policy recorded yet.")
	d, err := rec.Track("api", time.Second, 10)
	require.NoError(t, err)
	d.Observe("k", 3, false)
	page := get()
	assert.Contains(t, page, `class="no-data"`)
	assert.Contains(t, page, "No recommendation yet: observed 0s of the 1h0m0s required.")
}
