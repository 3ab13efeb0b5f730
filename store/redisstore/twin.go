package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// twinBatch is how many steps one StepTwin script call carries.
const twinBatch = 500

// StepTwin runs alg's Lua twin ([algo.Spec].Lua) on the Redis server once
// for each i, independently: on states[i], at now[i] (Unix microseconds),
// with cost n[i] (negative refunds, 0 peeks). It writes the new state to
// states[i] and the decision to out[i]. No key is read or written; the
// states travel to the script and back in the encoding of the store's keys,
// so a state that survives StepTwin survives being stored. The four slices
// must have the same length.
//
// StepTwin exists for the conformance suite, which requires that it agree
// exactly with alg's Go step (storetest.RunEquivalence); nothing else needs
// it. Steps go to Redis in batches of a few hundred per script call; the
// call is bounded by the store's timeout per batch, and is not subject to
// the failure policy (an error is returned as it is).
func (s *Store) StepTwin(ctx context.Context, alg algo.Algorithm, states []algo.State, now, n []int64, out []floodgate.Decision) error {
	if len(now) != len(states) || len(n) != len(states) || len(out) != len(states) {
		return fmt.Errorf("%w: redisstore: StepTwin with %d states, %d times, %d costs and %d decisions", floodgate.ErrInvalidConfig, len(states), len(now), len(n), len(out))
	}
	p, err := s.prepare(alg)
	if err != nil {
		return err
	}
	if err := s.ready(); err != nil {
		return err
	}
	script := scriptFor(kindTwin, []uint16{p.twin})
	for lo := 0; lo < len(states); lo += twinBatch {
		hi := min(lo+twinBatch, len(states))
		args := make([]string, 0, len(p.args)+3*(hi-lo))
		args = append(args, p.args...)
		for i := lo; i < hi; i++ {
			args = append(args, encodeState(&states[i], p.spec.Words, p.spec.MaxLog), strconv.FormatInt(now[i], 10), strconv.FormatInt(n[i], 10))
		}
		cctx, cancel := s.callContext(ctx)
		arr, err := s.call(cctx, script, nil, args).ToArray()
		if cancel != nil {
			cancel()
		}
		if err != nil {
			return fmt.Errorf("redisstore: StepTwin: %w", err)
		}
		if len(arr) != 7*(hi-lo) {
			return errReply
		}
		for i := lo; i < hi; i++ {
			r := arr[7*(i-lo):]
			v, err := r[0].ToString()
			if err != nil {
				return fmt.Errorf("%w: %w", errReply, err)
			}
			if states[i], err = decodeState(v, p.spec.Words, p.spec.MaxLog); err != nil {
				return err
			}
			if out[i], err = decode(r[1:7]); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeState is the Go twin of the scripts' encode: the words in decimal
// joined by ",", then, with a log, ";" and the log entries joined by ",".
func encodeState(s *algo.State, words, maxLog int) string {
	var b strings.Builder
	for j := range words {
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s.W[j], 10))
	}
	if maxLog > 0 && len(s.Log) > 0 {
		b.WriteByte(';')
		for j, x := range s.Log {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(x, 10))
		}
	}
	return b.String()
}

// decodeState is the inverse of encodeState.
func decodeState(v string, words, maxLog int) (algo.State, error) {
	var s algo.State
	wpart, lpart, _ := strings.Cut(v, ";")
	for j, x := range strings.Split(wpart, ",") {
		if j >= words {
			return s, fmt.Errorf("%w: state %q has more than %d words", errReply, v, words)
		}
		w, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return s, fmt.Errorf("%w: state %q: %w", errReply, v, err)
		}
		s.W[j] = w
	}
	if maxLog > 0 {
		s.Log = []int64{}
		if lpart != "" {
			for x := range strings.SplitSeq(lpart, ",") {
				e, err := strconv.ParseInt(x, 10, 64)
				if err != nil {
					return s, fmt.Errorf("%w: state %q: %w", errReply, v, err)
				}
				s.Log = append(s.Log, e)
			}
		}
	}
	return s, nil
}
