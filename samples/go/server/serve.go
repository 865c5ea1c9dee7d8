package main

import (
	"context"
	"errors"
	"net"
	"net/http"

	"pulseinfer"
)

// serve answers on listener until ctx ends, then shuts down gracefully: streams in progress
// finish first.
func serve(ctx context.Context, listener net.Listener, engine *pulseinfer.Engine) error {
	mux := http.NewServeMux()
	mux.Handle("/v1/completions", &completionHandler{engine: engine})
	server := &http.Server{Handler: mux}
	shutdown := make(chan error, 1)
	go func() {
		<-ctx.Done()
		shutdown <- server.Shutdown(context.Background())
	}()
	if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-shutdown
}
