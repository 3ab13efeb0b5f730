package main

import (
	"strconv"
	"time"
)

// fmtRate prints a rate per second with the digits that matter.
func fmtRate(perSec float64) string {
	switch {
	case perSec >= 100:
		return strconv.FormatFloat(perSec, 'f', 0, 64)
	case perSec >= 1:
		return strconv.FormatFloat(perSec, 'f', -1, 64)
	default:
		return strconv.FormatFloat(perSec, 'g', 3, 64)
	}
}

// fmtDuration prints seconds as a rounded duration.
func fmtDuration(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Microsecond).String()
	}
	return d.String()
}
