"""The Go package against the installed library (its pulseinfer_pkgconfig build tag): a module
outside the tree that requires pulseinfer (replaced by bindings/go, as the binding's README says
for a module outside it) links the library of the unpacked Debian packages through pkg-config
and answers a chat from SmolLM2."""
import os

from packaging_util import MODEL, REPO, libdir, run

MAIN = """package main

import (
	"context"
	"fmt"
	"os"

	"pulseinfer"
)

func main() {
	model, err := pulseinfer.LoadModel(os.Args[1], nil)
	if err != nil {
		panic(err)
	}
	defer model.Close()
	engine, err := pulseinfer.NewEngine(model, nil)
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	sampling := pulseinfer.DefaultSamplingParams()
	sampling.Temperature = 0
	sampling.MaxTokens = 16
	chat := []pulseinfer.ChatMessage{{Role: "user", Content: "What is the capital of France?"}}
	request, err := engine.GenerateChat(context.Background(), chat, &sampling)
	if err != nil {
		panic(err)
	}
	result, err := request.Wait()
	if err != nil {
		panic(err)
	}
	fmt.Println(pulseinfer.Version(), result.Text)
}
"""


def test_a_go_module_links_the_installed_library(root, tmp_path):
    module = tmp_path / "consumer"
    module.mkdir()
    (module / "main.go").write_text(MAIN)
    (module / "go.mod").write_text(
        "module consumer\n\ngo 1.19\n\nrequire pulseinfer v0.0.0\n\n"
        f"replace pulseinfer => {REPO / 'bindings' / 'go'}\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("CGO_")}
    env.update(GOPROXY="off", GOFLAGS="-mod=mod", PKG_CONFIG_PATH=str(libdir(root) / "pkgconfig"),
               GOCACHE=str(tmp_path / "go-cache"))
    binary = tmp_path / "consumer-bin"
    run(["go", "build", "-tags", "pulseinfer_pkgconfig", "-o", str(binary), "."], cwd=module,
        env=env)
    linked = run(["ldd", str(binary)], env=dict(env, LD_LIBRARY_PATH=str(libdir(root))))
    assert str(libdir(root)) in linked, linked
    out = run([str(binary), str(MODEL)], env=dict(env, LD_LIBRARY_PATH=str(libdir(root))))
    assert out.startswith("0.1.0 ") and "Paris" in out, out
