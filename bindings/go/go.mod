module pulseinfer

go 1.19
