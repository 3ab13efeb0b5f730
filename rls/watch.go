package rls

import (
	"context"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchDir reloads the config directory dir (ReloadDir) whenever a file in
// it changes, until ctx ends: a change is applied about 100 ms after the
// last write, well within a second; a directory that does not load is
// reported (WithOnReload, the config_load_error metric) and the running
// config stays. Files replaced by a rename (editors, Kubernetes ConfigMaps
// swapping a symlinked directory) are seen too. WatchDir returns once the
// watch is set up, with an error when it cannot be.
func (s *Service) WatchDir(ctx context.Context, dir string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rls: %w", err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("rls: %w", err)
	}
	go func() {
		defer w.Close()
		const settle = 100 * time.Millisecond
		t := time.NewTimer(time.Hour)
		t.Stop()
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				t.Reset(settle)
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
				t.Reset(settle) // events may be lost: read the directory again
			case <-t.C:
				_ = s.ReloadDir(dir) // reported through report
			}
		}
	}()
	return nil
}
