package shadow

import (
	"math"
	"math/bits"
	"sync/atomic"
)

// distinct estimates how many different keys a policy saw: a HyperLogLog of
// 1,024 registers (one byte each, four to a word), relative standard error
// 1.04/sqrt(1024) = 3.3%.
type distinct struct {
	words [hllRegisters / 4]atomic.Uint32
}

const hllRegisters = 1024

// below reports whether the register of mixed hash m is below its rank,
// that is whether add(m) would change anything: a load, inlined, on
// every decision.
func (d *distinct) below(m uint64) bool {
	j := m >> 54
	rank := uint32(bits.LeadingZeros64(m<<10|1<<9)) + 1
	return (d.words[j>>2].Load()>>((j&3)*8))&0xff < rank
}

// add counts the key of mixed hash m.
func (d *distinct) add(m uint64) {
	j := m >> 54                                        // top 10 bits: the register
	rank := uint32(bits.LeadingZeros64(m<<10|1<<9)) + 1 // 1..55
	w := &d.words[j>>2]
	shift := (j & 3) * 8
	for {
		old := w.Load()
		if (old>>shift)&0xff >= rank {
			return
		}
		if w.CompareAndSwap(old, old&^(0xff<<shift)|rank<<shift) {
			return
		}
	}
}

func (d *distinct) reset() {
	for i := range d.words {
		d.words[i].Store(0)
	}
}

// estimate returns the estimated number of distinct keys.
func (d *distinct) estimate() float64 {
	const m = float64(hllRegisters)
	var sum float64
	zeros := 0
	for i := range d.words {
		w := d.words[i].Load()
		for k := 0; k < 4; k++ {
			r := (w >> (8 * k)) & 0xff
			if r == 0 {
				zeros++
			}
			sum += math.Ldexp(1, -int(r))
		}
	}
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros))
	}
	return e
}
