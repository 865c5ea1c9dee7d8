package main

import (
	"strings"
	"testing"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

func TestOptionsMapToTheEngineParams(t *testing.T) {
	o, err := parseOptions([]string{"--model", "m.gguf", "--addr", "127.0.0.1:9", "--max-concurrent", "3",
		"--max-batch", "4", "--max-context", "1024", "--kv-memory-mib", "2", "--offload", "headwise",
		"--budget", "512", "--admission", "every", "--host-tokens", "4096", "--slot-tokens", "2048",
		"--micro-batches", "2", "--host-codec", "fp8", "--prefix-cache", "--tensor-parallel", "2"})
	if err != nil {
		t.Fatal(err)
	}
	e := o.engine
	if o.model != "m.gguf" || o.addr != "127.0.0.1:9" || o.maxConcurrent != 3 || e.MaxBatch != 4 ||
		e.MaxContext != 1024 || e.KVMemoryBytes != 2<<20 || e.OffloadMode != pulseinfer.OffloadHeadWise ||
		e.OffloadBudgetTokens != 512 || e.OffloadAdmission != pulseinfer.AdmissionOffloadEvery ||
		e.OffloadHostTokens != 4096 || e.OffloadSlotTokens != 2048 || e.MicroBatches != 2 ||
		e.OffloadHostCodec != pulseinfer.HostCodecFP8 || !e.OffloadPrefixCache ||
		o.modelParams.TensorParallelSize != 2 {
		t.Errorf("options %+v", o)
	}
	defaults, err := parseOptions([]string{"--model", "m.gguf"})
	if err != nil || defaults.engine != pulseinfer.DefaultEngineParams() ||
		defaults.modelParams != pulseinfer.DefaultModelParams() {
		t.Errorf("the defaults: %+v, %v; want the library's", defaults.engine, err)
	}
}

func TestBadOptionsAreRefused(t *testing.T) {
	for _, test := range []struct {
		args []string
		want string
	}{
		{[]string{}, "usage"},
		{[]string{"--model", "m", "--offload", "sparse"}, "--offload"},
		{[]string{"--model", "m", "--admission", "some"}, "--admission"},
		{[]string{"--model", "m", "--host-codec", "fp4"}, "--host-codec"},
		{[]string{"--model", "m", "--max-concurrent", "0"}, "--max-concurrent"},
		{[]string{"--model", "m", "extra"}, "usage"},
	} {
		if _, err := parseOptions(test.args); err == nil || !strings.Contains(err.Error(), test.want) {
			t.Errorf("%v: %v, want an error about %s", test.args, err, test.want)
		}
	}
}
