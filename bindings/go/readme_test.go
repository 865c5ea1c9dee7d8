package pulseinfer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeExample builds and runs the Go program of README.md as a module of its own.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := strings.Cut(string(readme), "```go\n")
	program, _, closed := strings.Cut(rest, "```\n")
	if !found || !closed {
		t.Fatal("README.md has no ```go block")
	}
	binding, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	module := modulePath(t)
	dir := t.TempDir()
	goMod := "module example\n\ngo 1.19\n\nrequire " + module + " v0.0.0\n\nreplace " + module + " => " + binding + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
	modelPath, err := filepath.Abs(modelPath())
	if err != nil {
		t.Fatal(err)
	}
	command := exec.Command("go", "run", ".", modelPath)
	command.Dir = dir
	output, err := command.CombinedOutput()
	if err != nil || !strings.Contains(string(output), "Paris") || !strings.Contains(string(output), "tokens (") {
		t.Errorf("the README's example: %v\n%s", err, output)
	}
}

// modulePath is the binding's module path, as its go.mod declares it.
func modulePath(t *testing.T) string {
	goMod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(goMod), "\n")
	if !strings.HasPrefix(line, "module ") {
		t.Fatalf("go.mod starts with %q, not a module line", line)
	}
	return strings.TrimPrefix(line, "module ")
}
