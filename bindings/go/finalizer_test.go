package pulseinfer_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

// A Model and an Engine dropped without Close are closed by their finalizers once collected: the
// model's handle is freed and the engine's stepping goroutine ends.
func TestDroppedModelAndEngineAreClosedByTheirFinalizers(t *testing.T) {
	freed := make(chan struct{}, 1)
	defer pulseinfer.OnModelFreed(func() { freed <- struct{}{} })()
	runtime.GC()
	goroutines := runtime.NumGoroutine()
	func() {
		tinyEngine, err := pulseinfer.NewEngine(loadTinyModel(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		request, err := tinyEngine.Generate(context.Background(), []int32{5, 6, 7}, greedy(2))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := readAll(request); err != nil {
			t.Fatal(err)
		}
	}()
	modelWasFreed := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		select {
		case <-freed:
			modelWasFreed = true
		default:
		}
		if modelWasFreed && runtime.NumGoroutine() <= goroutines {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after collection: model freed %v, %d goroutines (%d before the engine)", modelWasFreed,
		runtime.NumGoroutine(), goroutines)
}
