module pulseinfer-samples

go 1.19

require github.com/libpulseinfer/libpulseinfer/bindings/go v0.0.0

replace github.com/libpulseinfer/libpulseinfer/bindings/go => ../../bindings/go
