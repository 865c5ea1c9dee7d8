//go:build !pulseinfer_pkgconfig

package pulseinfer

// The library of this source tree: the header from capi/include and libpulseinfer.so from
// build/lib, found at run time through the rpath. CGO_CFLAGS and CGO_LDFLAGS come before these
// flags, so "-I DIR" and "-L DIR -Wl,-rpath,DIR" there select another build.

// #cgo CFLAGS: -I${SRCDIR}/../../capi/include
// #cgo LDFLAGS: -L${SRCDIR}/../../build/lib -Wl,-rpath,${SRCDIR}/../../build/lib -lpulseinfer
import "C"
