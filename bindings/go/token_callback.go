package pulseinfer

// #include <pulseinfer/pulseinfer.h>
// #include <stdint.h>
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// goTokenEvent receives each token event of a request, on the engine's stepping goroutine.
// The request's channel holds all its tokens, so the send never blocks the stepping loop.
//
//export goTokenEvent
func goTokenEvent(handle C.uintptr_t, event *C.pulse_token_event) C.int {
	request := cgo.Handle(handle).Value().(*Request)
	if request.ctx.Err() != nil {
		return 1 // cancels the request: no further events
	}
	if event.token >= 0 { // -1 is a failed request's last event; Wait reports the failure
		request.tokens <- Token{ID: int32(event.token), Text: eventText(event)}
	}
	return 0
}

// eventText is the event's text when the library's struct has the text fields.
func eventText(event *C.pulse_token_event) string {
	end := unsafe.Offsetof(event.text_len) + unsafe.Sizeof(event.text_len)
	if uintptr(event.struct_size) < end || event.text == nil {
		return ""
	}
	return C.GoStringN(event.text, C.int(event.text_len))
}
