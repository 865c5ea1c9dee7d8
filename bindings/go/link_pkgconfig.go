//go:build pulseinfer_pkgconfig

package pulseinfer

// An installed library, found with pkg-config (pulseinfer.pc): build with
// -tags pulseinfer_pkgconfig.

// #cgo pkg-config: pulseinfer
import "C"
