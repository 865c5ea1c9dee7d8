package pulseinfer

import "C"

import "time"

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func milliseconds(ms C.double) time.Duration {
	return time.Duration(float64(ms) * float64(time.Millisecond))
}
