package pulseinfer

// #include <pulseinfer/pulseinfer.h>
import "C"

import (
	"fmt"
	"runtime/cgo"
	"sync"
)

// engineLoop is the one goroutine that steps a C engine, while any request is pending; every
// token callback runs on it. Requests are submitted from any goroutine and join the running
// batch at the next step. Only this goroutine releases requests, after the step that finished
// them, so no event can reach a finished Request.
type engineLoop struct {
	engine       *C.pulse_engine
	maxContext   int32 // the most tokens one request can generate
	hasTokenizer bool

	wake    chan struct{} // a request was submitted (capacity 1)
	stop    chan struct{} // closed by close
	stopped chan struct{} // closed when run returns

	mu      sync.Mutex // guards the fields below, and the engine against close
	closed  bool
	active  map[*Request]struct{}
	submits uint64 // requests submitted so far
}

func startEngineLoop(engine *C.pulse_engine, maxContext int32, hasTokenizer bool) *engineLoop {
	l := &engineLoop{
		engine:       engine,
		maxContext:   maxContext,
		hasTokenizer: hasTokenizer,
		wake:         make(chan struct{}, 1),
		stop:         make(chan struct{}),
		stopped:      make(chan struct{}),
		active:       make(map[*Request]struct{}),
	}
	go l.run()
	return l
}

func (l *engineLoop) run() {
	defer close(l.stopped)
	for {
		l.cancelEnded()
		pending, err := l.step()
		l.finishDone(err)
		if pending == 0 {
			select {
			case <-l.wake:
			case <-l.stop:
			}
		}
		select {
		case <-l.stop:
			l.finishDone(ErrEngineClosed)
			return
		default:
		}
	}
}

// step runs one engine step and returns the number of requests still pending (0 when it
// failed).
func (l *engineLoop) step() (int32, error) {
	submits := l.submitted()
	report := C.pulse_step_report{struct_size: C.sizeof_pulse_step_report}
	if err := call(func() C.pulse_status { return C.pulse_engine_step(l.engine, &report) }); err != nil {
		return 0, err
	}
	// As pulse_engine_run: stepping again would spin forever. Unless a request was submitted
	// during the step, after it had scheduled (nothing): the next step schedules that one.
	if report.scheduled == 0 && report.pending > 0 && l.submitted() == submits {
		return 0, fmt.Errorf("pulseinfer: a step scheduled nothing while %d requests are pending", report.pending)
	}
	return int32(report.pending), nil
}

func (l *engineLoop) submitted() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.submits
}

// withEngine runs f with the engine unless it is closed; closing waits for f.
func (l *engineLoop) withEngine(f func(engine *C.pulse_engine) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrEngineClosed
	}
	return f(l.engine)
}

// submitFunc queues a request with the library, its events going to handle.
type submitFunc func(engine *C.pulse_engine, sampling *C.pulse_sampling_params, handle C.uintptr_t,
	id *C.uint64_t) C.pulse_status

func (l *engineLoop) submit(request *Request, sampling *C.pulse_sampling_params, submit submitFunc) error {
	return l.withEngine(func(engine *C.pulse_engine) error {
		request.handle = cgo.NewHandle(request)
		var id C.uint64_t
		err := call(func() C.pulse_status { return submit(engine, sampling, C.uintptr_t(request.handle), &id) })
		if err != nil {
			request.handle.Delete()
			return err
		}
		request.id = uint64(id)
		l.active[request] = struct{}{}
		l.submits++
		select {
		case l.wake <- struct{}{}:
		default:
		}
		return nil
	})
}

// tokenBound is the most tokens a request with maxTokens can generate.
func (l *engineLoop) tokenBound(maxTokens int32) int {
	switch {
	case maxTokens < 0:
		return 0
	case maxTokens > l.maxContext:
		return int(l.maxContext)
	}
	return int(maxTokens)
}

// cancelEnded cancels the requests whose context ended (a running one is cancelled sooner, by
// its next token event).
func (l *engineLoop) cancelEnded() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for request := range l.active {
		if request.ctx.Err() != nil {
			l.cancel(request)
		}
	}
}

// cancel ends a request now; it cannot fail for an active request (PULSE_OK when it finished
// meanwhile, and only finishDone releases it).
func (l *engineLoop) cancel(request *Request) {
	C.pulse_request_cancel(l.engine, C.uint64_t(request.id))
}

// finishDone hands each finished request its result, and releases it. With an error (a failed
// step, or the engine closing), every request is cancelled first and fails with it.
func (l *engineLoop) finishDone(failure error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for request := range l.active {
		if failure != nil {
			l.cancel(request)
		}
		stats := C.pulse_request_stats{struct_size: C.sizeof_pulse_request_stats}
		if err := call(func() C.pulse_status {
			return C.pulse_request_stats_get(l.engine, C.uint64_t(request.id), &stats)
		}); err != nil {
			delete(l.active, request)
			request.finish(Result{}, err)
			continue
		}
		if stats.state != C.PULSE_REQUEST_FINISHED {
			continue
		}
		result, err := l.collect(request.id, &stats)
		if stats.finish_reason == C.PULSE_FINISH_CANCELLED {
			switch {
			case failure != nil:
				err = failure
			case request.ctx.Err() != nil:
				err = request.ctx.Err()
			}
		}
		delete(l.active, request)
		request.finish(result, err)
	}
}

// collect reads a finished request's result and releases it. The error is its failure
// (pulse_request_result's status and message).
func (l *engineLoop) collect(id uint64, stats *C.pulse_request_stats) (Result, error) {
	result := Result{Stats: requestStatsFromC(stats), Tokens: make([]int32, stats.generated_tokens)}
	var count C.size_t
	err := call(func() C.pulse_status {
		return C.pulse_request_result(l.engine, C.uint64_t(id), tokenArray(result.Tokens),
			C.size_t(len(result.Tokens)), &count)
	})
	if int(count) < len(result.Tokens) {
		result.Tokens = result.Tokens[:count]
	}
	if l.hasTokenizer {
		text, textErr := readText(16*len(result.Tokens),
			func(text *C.char, capacity C.size_t, length *C.size_t) C.pulse_status {
				return C.pulse_request_text(l.engine, C.uint64_t(id), text, capacity, length)
			})
		result.Text = text
		if err == nil {
			err = textErr
		}
	}
	releaseErr := call(func() C.pulse_status { return C.pulse_request_release(l.engine, C.uint64_t(id)) })
	if err == nil {
		err = releaseErr
	}
	return result, err
}

// close stops the loop, failing the active requests with ErrEngineClosed, and frees the engine.
func (l *engineLoop) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.stopped
	C.pulse_engine_free(l.engine)
}
