package main

import (
	"context"
	"errors"
	"net"
	"net/http"
)

// serve answers on listener until ctx ends, then shuts down gracefully: streams in progress
// finish first.
func serve(ctx context.Context, listener net.Listener, s *server) error {
	httpServer := &http.Server{Handler: s.routes()}
	shutdown := make(chan error, 1)
	go func() {
		<-ctx.Done()
		shutdown <- httpServer.Shutdown(context.Background())
	}()
	if err := httpServer.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-shutdown
}
