module pulseinfer-server

go 1.19

require pulseinfer v0.0.0

replace pulseinfer => ../bindings/go
