module github.com/libpulseinfer/libpulseinfer/bindings/go

go 1.19
