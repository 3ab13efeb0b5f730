package shadow

import "time"

// MaxPolicyBytes bounds the memory of one policy's recording with the
// default Config (4,096 slots, top 16): 192 KiB, whatever the number of
// keys (153 KiB by construction, about 161 KiB once the allocator has
// rounded the blocks up), as the package documentation states.
const MaxPolicyBytes = 192 << 10

// ObserveAt is Observe at time now (Unix nanoseconds).
func (d *Demand) ObserveAt(now int64, key string, n int64, refused bool) {
	d.observeAt(now, key, n, refused)
}

// ReportAt is Report at time now (Unix nanoseconds).
func (d *Demand) ReportAt(now int64) Report { return d.reportAt(now) }

// Window is the length of the windows demand is measured in.
func (d *Demand) Window() time.Duration { return time.Duration(d.window) }

// Config is the Recorder's configuration, defaults filled in.
func (r *Recorder) Config() Config { return r.cfg }

// Bytes is the memory the recording holds, by construction.
func (d *Demand) Bytes() int { return d.bytes() }
