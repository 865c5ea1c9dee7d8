package pulseinfer_test

import (
	"regexp"
	"testing"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

func TestLibrary(t *testing.T) {
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(pulseinfer.Version()) {
		t.Errorf("Version() = %q, want MAJOR.MINOR.PATCH", pulseinfer.Version())
	}
	if pulseinfer.ABIVersion() != pulseinfer.HeaderABIVersion {
		t.Errorf("ABIVersion() = %d, the header's is %d", pulseinfer.ABIVersion(), pulseinfer.HeaderABIVersion)
	}
	if !pulseinfer.Features().Has(pulseinfer.FeatureCPU) {
		t.Errorf("Features() = %#x lacks the CPU backend", pulseinfer.Features())
	}
}
