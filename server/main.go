// Command pulseinfer-server serves one model through OpenAI's HTTP API:
//
//	pulseinfer-server --model PATH [--addr 127.0.0.1:8080] [--max-concurrent 64]
//	    [--max-batch N] [--max-context N] [--kv-memory-mib N]
//	    [--offload off|solohead|headwise] [--budget TOKENS] [--admission adaptive|every]
//	    [--host-tokens N] [--slot-tokens N] [--micro-batches N] [--host-codec raw|fp8]
//	    [--prefix-cache]
//
// POST /v1/chat/completions and /v1/completions (streamed as server-sent events with "stream":
// true), GET /v1/models, /health and /metrics (Prometheus). Every request shares one engine's
// batch; a client that disconnects cancels its request; past --max-concurrent requests in
// progress the answer is 429. README.md says what each route takes and returns.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

type options struct {
	model         string
	addr          string
	maxConcurrent int
	modelParams   pulseinfer.ModelParams
	engine        pulseinfer.EngineParams
}

func parseOptions(args []string) (options, error) {
	flags := flag.NewFlagSet("pulseinfer-server", flag.ContinueOnError)
	defaults := pulseinfer.DefaultEngineParams()
	o := options{modelParams: pulseinfer.DefaultModelParams(), engine: defaults}
	flags.StringVar(&o.model, "model", "", "the model: a GGUF file or a Hugging Face directory")
	flags.StringVar(&o.addr, "addr", "127.0.0.1:8080", "the address to listen on")
	flags.IntVar(&o.maxConcurrent, "max-concurrent", 64,
		"requests in progress at once; past it, 429")
	tensorParallel := flags.Int("tensor-parallel", int(o.modelParams.TensorParallelSize),
		"split the model over this many ranks (CPU: the cores shared between them); 0 or 1: one")
	maxBatch := flags.Int("max-batch", int(defaults.MaxBatch), "sequences in one engine step")
	maxContext := flags.Int("max-context", int(defaults.MaxContext),
		"prompt plus generated tokens a request may reach (0: the model's)")
	kvMiB := flags.Int64("kv-memory-mib", 0, "device memory for the KV, in MiB (0: the default)")
	offload := flags.String("offload", "off",
		"sparse attention over KV offloaded to host memory: off, solohead or headwise")
	budget := flags.Int("budget", int(defaults.OffloadBudgetTokens),
		"tokens an offloaded request attends to each step")
	admission := flags.String("admission", "adaptive",
		"which requests are offloaded: adaptive (those that do not fit) or every")
	flags.Int64Var(&o.engine.OffloadHostTokens, "host-tokens", defaults.OffloadHostTokens,
		"the host tier's capacity in tokens (0: the library's default)")
	flags.Int64Var(&o.engine.OffloadSlotTokens, "slot-tokens", defaults.OffloadSlotTokens,
		"the device slots in tokens (0: the library's default)")
	microBatches := flags.Int("micro-batches", int(defaults.MicroBatches),
		"micro-batches a decode step runs as: 0 chosen each step, 1 to 8 fixed")
	hostCodec := flags.String("host-codec", "raw",
		"how the host tier stores offloaded blocks: raw, or fp8 (half a bf16 block's bytes)")
	flags.BoolVar(&o.engine.OffloadPrefixCache, "prefix-cache", defaults.OffloadPrefixCache,
		"share the host tier's copy of prompt blocks between requests whose prompts start alike "+
			"(a system prompt, a document, an earlier turn's prompt): their prefill is skipped")
	if err := flags.Parse(args); err != nil {
		return o, err
	}
	if o.model == "" || flags.NArg() > 0 {
		return o, fmt.Errorf("usage: pulseinfer-server --model PATH [flags]; see --help")
	}
	if o.maxConcurrent < 1 {
		return o, fmt.Errorf("--max-concurrent must be at least 1")
	}
	o.modelParams.TensorParallelSize = int32(*tensorParallel)
	o.engine.MaxBatch = int32(*maxBatch)
	o.engine.MaxContext = int32(*maxContext)
	o.engine.KVMemoryBytes = *kvMiB << 20
	o.engine.OffloadBudgetTokens = int32(*budget)
	o.engine.MicroBatches = int32(*microBatches)
	var err error
	if o.engine.OffloadAdmission, err = pick("--admission", *admission, []string{"adaptive", "every"},
		[]pulseinfer.Admission{pulseinfer.AdmissionIOAdaptive, pulseinfer.AdmissionOffloadEvery}); err != nil {
		return o, err
	}
	if o.engine.OffloadHostCodec, err = pick("--host-codec", *hostCodec, []string{"raw", "fp8"},
		[]pulseinfer.HostCodec{pulseinfer.HostCodecRaw, pulseinfer.HostCodecFP8}); err != nil {
		return o, err
	}
	if o.engine.OffloadMode, err = pick("--offload", *offload, []string{"off", "solohead", "headwise"},
		[]pulseinfer.OffloadMode{pulseinfer.OffloadOff, pulseinfer.OffloadSoloHead,
			pulseinfer.OffloadHeadWise}); err != nil {
		return o, err
	}
	return o, nil
}

// pick is the value that `name` stands for among names (values in the same order).
func pick[T any](flag, name string, names []string, values []T) (T, error) {
	for i, candidate := range names {
		if candidate == name {
			return values[i], nil
		}
	}
	var none T
	return none, fmt.Errorf("%s expects one of %s, got %q", flag, strings.Join(names, ", "), name)
}

func main() {
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulseinfer-server:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "pulseinfer-server:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	model, err := pulseinfer.LoadModel(o.model, &o.modelParams)
	if err != nil {
		return err
	}
	defer model.Close()
	engine, err := pulseinfer.NewEngine(model, &o.engine)
	if err != nil {
		return err
	}
	defer engine.Close()
	listener, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	name := strings.TrimSuffix(filepath.Base(o.model), filepath.Ext(o.model))
	log.Printf("serving %s on http://%s/v1", name, listener.Addr())
	return serve(ctx, listener, newServer(engine, name, o.maxConcurrent))
}
