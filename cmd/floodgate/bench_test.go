package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeBenchLog writes n lines in format (nginx combined, envoy JSON or
// csv): 10,000 client addresses (Zipf-distributed, a few heavy), 10,000
// lines a second.
func writeBenchLog(tb testing.TB, n int, format string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "access.log")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, 9999)
	t0 := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	for i := range n {
		ip := zipf.Uint64()
		ts := t0.Add(time.Duration(i) * 100 * time.Microsecond)
		switch format {
		case "nginx":
			fmt.Fprintf(w, "10.0.%d.%d - - [%s] \"GET /img/%d.png HTTP/1.1\" 200 %d \"-\" \"Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0\"\n",
				ip/256, ip%256, ts.Format("02/Jan/2006:15:04:05 -0700"), i%97, i%5000)
		case "envoy":
			fmt.Fprintf(w, `{"start_time":"%s","method":"GET","x-envoy-origin-path":"/img/%d.png","protocol":"HTTP/1.1","response_code":200,"response_flags":"-","bytes_received":0,"bytes_sent":%d,"duration":3,"user-agent":"curl/8.11.0",":authority":"images.example.com","upstream_host":"10.0.3.7:8080","downstream_remote_address":"10.0.%d.%d:%d","route_name":"images"}`+"\n",
				ts.Format("2006-01-02T15:04:05.000Z"), i%97, i%5000, ip/256, ip%256, 30000+i%30000)
		default:
			fmt.Fprintf(w, "%d.%06d,10.0.%d.%d,1\n", ts.Unix(), ts.Nanosecond()/1000, ip/256, ip%256)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BenchmarkReplay replays log lines through one token-bucket policy per
// client address (testdata/per-ip.yaml, -policy per-ip): the parse, the
// decision on the memory store and the recording, from a file in the page
// cache, for each format. lines/s is per core (the replay runs on one
// goroutine); lines/cpu-s divides by the process's CPU time instead, which
// a machine shared with other work gives more faithfully than the wall
// clock.
func BenchmarkReplay(b *testing.B) {
	for _, format := range []string{"nginx", "envoy", "csv"} {
		b.Run(format, func(b *testing.B) {
			const lines = 200_000
			path := writeBenchLog(b, lines, format)
			st, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			o := replayOpts{config: "testdata/per-ip.yaml", policy: "per-ip", format: format, logFormat: nginxCombined,
				minObs: time.Hour, topK: 16, maxRefused: -1}
			b.SetBytes(st.Size())
			cpu0 := cpuTime(b)
			for b.Loop() {
				res, err := replay(context.Background(), o, []string{path}, nil)
				if err != nil || res.Decided != lines {
					b.Fatalf("replay: %v, %d decided", err, res.Decided)
				}
			}
			b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
			b.ReportMetric(float64(lines)*float64(b.N)/(cpuTime(b)-cpu0).Seconds(), "lines/cpu-s")
		})
	}
}

// cpuTime returns the process's CPU time (user and system).
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkParse parses one line of each format, as replay reads it (the
// fields of the default key).
func BenchmarkParse(b *testing.B) {
	lines := map[string]string{}
	for _, format := range []string{"nginx", "envoy", "csv"} {
		data, err := os.ReadFile(writeBenchLog(b, 1, format))
		if err != nil {
			b.Fatal(err)
		}
		lines[format] = strings.TrimSuffix(string(data), "\n")
	}
	for _, format := range []string{"nginx", "envoy", "csv"} {
		b.Run(format, func(b *testing.B) {
			rp, err := newReplayer(replayOpts{config: "testdata/per-ip.yaml", policy: "per-ip", format: format, logFormat: nginxCombined, minObs: time.Hour, topK: 16})
			if err != nil {
				b.Fatal(err)
			}
			defer rp.rec.Close()
			line := []byte(lines[format])
			p, r := rp.newParser(), record{vals: make([][]byte, rp.nfields)}
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				clear(r.vals)
				if err := p.parse(line, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
