package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMatchesTheCommand runs this sample and `pulseinfer generate --format ids` on one prompt:
// both print the same greedy token ids.
func TestMatchesTheCommand(t *testing.T) {
	modelPath := os.Getenv("PULSEINFER_MODEL")
	if modelPath == "" {
		modelPath = "../../../.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
	}
	buildDir := os.Getenv("BUILD_DIR")
	if buildDir == "" {
		buildDir = "../../../build"
	}
	sample := filepath.Join(t.TempDir(), "generate")
	if output, err := exec.Command("go", "build", "-o", sample, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, output)
	}
	args := []string{"--model", modelPath, "--prompt", "The capital of France is", "--max-tokens", "8"}
	command := filepath.Join(buildDir, "bin", "pulseinfer")
	want, err := exec.Command(command, append([]string{"generate", "--format", "ids", "--quiet"}, args...)...).Output()
	if err != nil {
		t.Fatalf("pulseinfer generate: %v", err)
	}
	got, err := exec.Command(sample, append(args, "--ids")...).Output()
	if err != nil {
		t.Fatalf("generate --ids: %v", err)
	}
	if string(got) != string(want) || strings.Count(string(got), ",") != 7 {
		t.Errorf("generate --ids printed %q, pulseinfer generate %q", got, want)
	}

	text, err := exec.Command(sample, args...).Output()
	if err != nil || len(strings.TrimSpace(string(text))) == 0 {
		t.Errorf("generate printed %q (%v)", text, err)
	}
	var exitErr *exec.ExitError
	if _, err := exec.Command(sample, "--model", "/no/such/model", "--prompt", "x").Output(); err == nil {
		t.Error("generate succeeded with a missing model")
	} else if !errors.As(err, &exitErr) || !strings.Contains(string(exitErr.Stderr), "/no/such/model") {
		t.Errorf("generate with a missing model: %v", err)
	}
}
