package pulseinfer

// #include <pulseinfer/pulseinfer.h>
import "C"

import (
	"errors"
	"unsafe"
)

// The header's output-buffer convention: when the result does not fit, nothing is written and
// the size needed comes back with ErrBufferTooSmall. Both readers try a guessed capacity first,
// then the size asked for.

type fillTokens func(tokens *C.int32_t, capacity C.size_t, count *C.size_t) C.pulse_status

func readTokens(guess int, fill fillTokens) ([]int32, error) {
	tokens := make([]int32, guess+1)
	for {
		var count C.size_t
		err := call(func() C.pulse_status {
			return fill((*C.int32_t)(unsafe.Pointer(&tokens[0])), C.size_t(len(tokens)), &count)
		})
		if errors.Is(err, ErrBufferTooSmall) {
			tokens = make([]int32, count)
			continue
		}
		if err != nil {
			return nil, err
		}
		return tokens[:count], nil
	}
}

type fillText func(text *C.char, capacity C.size_t, length *C.size_t) C.pulse_status

func readText(guess int, fill fillText) (string, error) {
	text := make([]byte, guess+1)
	for {
		var length C.size_t
		err := call(func() C.pulse_status {
			return fill((*C.char)(unsafe.Pointer(&text[0])), C.size_t(len(text)), &length)
		})
		if errors.Is(err, ErrBufferTooSmall) {
			text = make([]byte, length+1) // and the NUL
			continue
		}
		if err != nil {
			return "", err
		}
		return string(text[:length]), nil
	}
}

// tokenArray is the C view of tokens, NULL when there are none. The library only reads it
// during the call.
func tokenArray(tokens []int32) *C.int32_t {
	if len(tokens) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&tokens[0]))
}
