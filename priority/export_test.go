package priority

import "github.com/floodgate-go/floodgate/adaptive"

// Classes returns a copy of the shedder's classes.
func (p *Shedder) Classes() []ClassConfig { return append([]ClassConfig(nil), p.classes...) }

// Capacity returns the underlying gate.
func (p *Shedder) Capacity() *adaptive.Gate { return p.cap }
