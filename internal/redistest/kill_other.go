//go:build !linux

package redistest

import "os/exec"

// killWithParent does nothing outside Linux: StopCluster stops the
// servers.
func killWithParent(*exec.Cmd) {}
