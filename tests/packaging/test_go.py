"""The Go package as its users get it: a module outside the tree takes the binding's release with
`go get MODULE@vVERSION` (served by a local module proxy from bindings/go, as a tag
bindings/go/vVERSION would publish it), links the library of the unpacked Debian packages
through pkg-config (its pulseinfer_pkgconfig build tag) and answers a chat from SmolLM2."""
import json
import os
import zipfile

from packaging_util import MODEL, REPO, VERSION, libdir, run

BINDING = REPO / "bindings" / "go"
MODULE = (BINDING / "go.mod").read_text().splitlines()[0].removeprefix("module ")

MAIN = """package main

import (
	"context"
	"fmt"
	"os"

	pulseinfer "%s"
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
""" % MODULE


def module_proxy(directory):
    """A file-system module proxy holding bindings/go as release vVERSION (the layout and zip
    that `go get` reads from any GOPROXY)."""
    release = f"v{VERSION}"
    versions = directory / MODULE / "@v"
    versions.mkdir(parents=True)
    (versions / "list").write_text(release + "\n")
    (versions / f"{release}.info").write_text(
        json.dumps({"Version": release, "Time": "2026-01-01T00:00:00Z"}))
    (versions / f"{release}.mod").write_text((BINDING / "go.mod").read_text())
    with zipfile.ZipFile(versions / f"{release}.zip", "w") as archive:
        for path in sorted(BINDING.iterdir()):
            if path.is_file():
                archive.write(path, f"{MODULE}@{release}/{path.name}")
    return directory


def test_go_get_takes_the_release_and_links_the_installed_library(root, tmp_path):
    module = tmp_path / "consumer"
    module.mkdir()
    (module / "main.go").write_text(MAIN)
    (module / "go.mod").write_text("module consumer\n\ngo 1.19\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("CGO_")}
    env.update(GOPROXY=f"file://{module_proxy(tmp_path / 'proxy')}", GOSUMDB="off",
               GOFLAGS="-mod=mod -modcacherw", GOPATH=str(tmp_path / "gopath"),
               PKG_CONFIG_PATH=str(libdir(root) / "pkgconfig"),
               GOCACHE=str(tmp_path / "go-cache"))
    run(["go", "get", f"{MODULE}@v{VERSION}"], cwd=module, env=env)
    assert f"require {MODULE} v{VERSION}" in (module / "go.mod").read_text()
    binary = tmp_path / "consumer-bin"
    run(["go", "build", "-tags", "pulseinfer_pkgconfig", "-o", str(binary), "."], cwd=module,
        env=env)
    linked = run(["ldd", str(binary)], env=dict(env, LD_LIBRARY_PATH=str(libdir(root))))
    assert str(libdir(root)) in linked, linked
    out = run([str(binary), str(MODEL)], env=dict(env, LD_LIBRARY_PATH=str(libdir(root))))
    assert out.startswith(f"{VERSION} ") and "Paris" in out, out

