//go:build race

package lease_test

// raceOn: the race detector slows every process of a fleet test several
// times over, on a machine it shares with the other packages' tests.
const raceOn = true
