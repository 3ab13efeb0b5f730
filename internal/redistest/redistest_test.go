package redistest

import (
	"strconv"
	"strings"
	"testing"
)

// Start's server is its own process, and Kill stops it.
func TestStartIsOwnServer(t *testing.T) {
	s := Start(t)
	info, err := Info(s.Addr)
	if err != nil || !strings.Contains(info, "process_id:"+strconv.Itoa(s.cmd.Process.Pid)+"\r\n") {
		t.Fatalf("INFO %q, %v", info, err)
	}
	s.Kill()
	if _, err := Info(s.Addr); err == nil {
		t.Fatal("the killed server still answers")
	}
}
