package pulseinfer

// #include <pulseinfer/pulseinfer.h>
import "C"

// HeaderABIVersion is the ABI version of the header this package was built with; it equals
// ABIVersion() for a library that can be linked (the SONAME carries it).
const HeaderABIVersion = C.PULSE_ABI_VERSION

// Version is the library's version, "MAJOR.MINOR.PATCH".
func Version() string { return C.GoString(C.pulse_version()) }

// ABIVersion is the library's ABI version.
func ABIVersion() int { return int(C.pulse_abi_version()) }

// FeatureSet is a bit set of Feature* values; later versions may set bits unknown here.
type FeatureSet uint64

const (
	FeatureCPU          FeatureSet = C.PULSE_FEATURE_CPU           // the CPU backend is built
	FeatureCUDACompiled FeatureSet = C.PULSE_FEATURE_CUDA_COMPILED // the CUDA backend is built
	FeatureCUDADevice   FeatureSet = C.PULSE_FEATURE_CUDA_DEVICE   // and a CUDA device is present
)

// Features is what this build of the library supports.
func Features() FeatureSet { return FeatureSet(C.pulse_features()) }

// Has reports whether every feature of f is in s.
func (s FeatureSet) Has(f FeatureSet) bool { return s&f == f }
