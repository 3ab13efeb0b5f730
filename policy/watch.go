package policy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// ReloadFile reads the config file at path and applies it ([Live.Update]
// with the path as source): what a SIGHUP handler or an admin endpoint
// calls. A file that does not load leaves the running config in place; the
// error (a [*ConfigError] with file:line) is returned and reported to the
// change callback.
func (l *Live) ReloadFile(path string) (Change, error) {
	cfg, err := LoadFile(path)
	if err != nil {
		ch := Change{Version: l.version.Load(), Source: path, At: time.Now(), Err: err}
		l.report(ch)
		return ch, err
	}
	return l.Update(cfg, path)
}

// watchDebounce is how long the watcher waits after the last write before
// it reloads, so that an editor's write-rename-chmod sequence is one reload.
const watchDebounce = 100 * time.Millisecond

// WatchFile reloads the config file at path whenever it changes, until ctx
// ends. It watches the file's directory, and the directory of the file a
// symbolic link at path points to, so that editors and deployment tools
// that replace the file (write a new one, rename it over) or swap a link
// (a Kubernetes ConfigMap volume: path -> ..data/file, ..data swapped to a
// new directory) are seen too. Any change in those directories makes it
// read the file again, and reload it when its content changed. A change is
// applied within about 100 ms of the last write; a file that does not load
// is reported to the change callback and the observer, and the running
// config stays. WatchFile returns once the watch is set up, with an error
// when it cannot be (the file must exist); the watching runs in a
// goroutine that ends with ctx.
func (l *Live) WatchFile(ctx context.Context, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("policy: watching %s: %w", path, err)
	}
	content, err := os.ReadFile(abs)
	if err != nil {
		return fmt.Errorf("policy: watching %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("policy: watching %s: %w", path, err)
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return fmt.Errorf("policy: watching %s: %w", path, err)
	}
	fw := &fileWatch{w: w, abs: abs, last: sha256.Sum256(content)}
	fw.follow()
	go l.watch(ctx, fw, path)
	return nil
}

// watch reloads fw's file after each burst of changes (debounced) until ctx
// ends, and reports the watcher's errors as refused changes from path.
func (l *Live) watch(ctx context.Context, fw *fileWatch, path string) {
	defer fw.w.Close()
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case ev, ok := <-fw.w.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(watchDebounce)
			} else {
				timer.Reset(watchDebounce)
			}
			fire = timer.C
		case <-fire:
			fire = nil
			fw.follow()
			if fw.changed() {
				_, _ = l.ReloadFile(fw.abs)
			}
		case err, ok := <-fw.w.Errors:
			if !ok {
				return
			}
			l.report(Change{Version: l.version.Load(), Source: path, At: time.Now(), Err: fmt.Errorf("policy: watching %s: %w", path, err)})
		}
	}
}

// fileWatch is the state of one WatchFile.
type fileWatch struct {
	w      *fsnotify.Watcher
	abs    string
	target string   // the directory of the file a link at abs points to, when watched
	last   [32]byte // the content last read (sha256)
	gone   bool     // the file could not be read last time
}

// follow watches the directory of the file abs resolves to, when it is not
// abs's own, and stops watching the previous one.
func (fw *fileWatch) follow() {
	real, err := filepath.EvalSymlinks(fw.abs)
	if err != nil {
		return
	}
	dir := filepath.Dir(real)
	if dir == filepath.Dir(fw.abs) || dir == fw.target {
		return
	}
	if fw.target != "" {
		_ = fw.w.Remove(fw.target)
	}
	fw.target = ""
	if fw.w.Add(dir) == nil {
		fw.target = dir
	}
}

// changed reports whether the file reads differently than last time (a
// file that cannot be read counts as changed once, for its error to be
// reported).
func (fw *fileWatch) changed() bool {
	b, err := os.ReadFile(fw.abs)
	if err != nil {
		was := fw.gone
		fw.gone = true
		return !was
	}
	sum := sha256.Sum256(b)
	if !fw.gone && sum == fw.last {
		return false
	}
	fw.gone, fw.last = false, sum
	return true
}
