//go:build !race

package lease_test

const raceOn = false
