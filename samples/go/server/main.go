// Command server serves completions from one engine as server-sent events:
//
//	server --model PATH [--addr 127.0.0.1:8080]
//
// POST /v1/completions with a JSON body such as {"prompt": "Once upon a time", "max_tokens": 16,
// "temperature": 0} streams one "token" event per generated token ({"id": 7042, "text": " Paris"})
// and a last "done" event with the finish reason and the request's stats, or an "error" event.
// All requests share the engine's batch; a client that disconnects cancels its request.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"

	"pulseinfer"
)

func main() {
	modelPath := flag.String("model", "", "the model: a GGUF file or a Hugging Face directory")
	addr := flag.String("addr", "127.0.0.1:8080", "the address to listen on")
	flag.Parse()
	if *modelPath == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *modelPath, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, modelPath, addr string) error {
	model, err := pulseinfer.LoadModel(modelPath, nil)
	if err != nil {
		return err
	}
	defer model.Close()
	engine, err := pulseinfer.NewEngine(model, nil)
	if err != nil {
		return err
	}
	defer engine.Close()
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("serving %s on http://%s/v1/completions", modelPath, listener.Addr())
	return serve(ctx, listener, engine)
}
