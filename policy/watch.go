package policy

import (
	"context"
	"fmt"
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
// ends. It watches the file's directory, so that editors and deployment
// tools that replace the file (write a new one, rename it over) are seen
// too. A change is applied within about 100 ms of the last write; a file
// that does not load is reported to the change callback and the running
// config stays. WatchFile returns once the watch is set up, with an error
// when it cannot be; the watching runs in a goroutine that ends with ctx.
func (l *Live) WatchFile(ctx context.Context, path string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("policy: watching %s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		w.Close()
		return fmt.Errorf("policy: watching %s: %w", path, err)
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return fmt.Errorf("policy: watching %s: %w", path, err)
	}
	go func() {
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Clean(ev.Name) != abs || ev.Op == fsnotify.Chmod {
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
				_, _ = l.ReloadFile(abs)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				l.report(Change{Version: l.version.Load(), Source: path, At: time.Now(), Err: fmt.Errorf("policy: watching %s: %w", path, err)})
			}
		}
	}()
	return nil
}
