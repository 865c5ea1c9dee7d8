package pulseinfer

// #include <stdlib.h>
// #include <pulseinfer/pulseinfer.h>
import "C"

import "unsafe"

// cMemory is the C memory that one library call reads: the strings and arrays that a
// parameter struct points to (cgo forbids passing Go memory that holds Go pointers). free
// releases all of it.
type cMemory struct {
	blocks []unsafe.Pointer
}

// cArray allocates a C array of count elements in m.
func cArray[T any](m *cMemory, count int) []T {
	var element T
	block := C.malloc(C.size_t(count) * C.size_t(unsafe.Sizeof(element)))
	m.blocks = append(m.blocks, block)
	return unsafe.Slice((*T)(block), count)
}

// string is s with a NUL after it.
func (m *cMemory) string(s string) *C.char {
	text := C.CString(s)
	m.blocks = append(m.blocks, unsafe.Pointer(text))
	return text
}

// optionalString is NULL for "", which the library reads as its default.
func (m *cMemory) optionalString(s string) *C.char {
	if s == "" {
		return nil
	}
	return m.string(s)
}

// tokens is a copy of tokens, NULL when there are none.
func (m *cMemory) tokens(tokens []int32) *C.int32_t {
	if len(tokens) == 0 {
		return nil
	}
	array := cArray[int32](m, len(tokens))
	copy(array, tokens)
	return (*C.int32_t)(unsafe.Pointer(&array[0]))
}

// chatMessages is an array of copies of messages, NULL when there are none.
func (m *cMemory) chatMessages(messages []ChatMessage) *C.pulse_chat_message {
	if len(messages) == 0 {
		return nil
	}
	array := cArray[C.pulse_chat_message](m, len(messages))
	for i, message := range messages {
		array[i] = C.pulse_chat_message{role: m.string(message.Role), content: m.string(message.Content)}
	}
	return &array[0]
}

// strings is an array of copies of strings, NULL when there are none.
func (m *cMemory) strings(strings []string) **C.char {
	if len(strings) == 0 {
		return nil
	}
	array := cArray[*C.char](m, len(strings))
	for i, s := range strings {
		array[i] = m.string(s)
	}
	return &array[0]
}

func (m *cMemory) free() {
	for _, block := range m.blocks {
		C.free(block)
	}
	m.blocks = nil
}
