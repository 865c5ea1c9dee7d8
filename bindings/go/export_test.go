package pulseinfer

// OnModelFreed makes f run after each model is freed, until the returned restore is called.
func OnModelFreed(f func()) (restore func()) {
	previous := modelFreed
	modelFreed = f
	return func() { modelFreed = previous }
}
