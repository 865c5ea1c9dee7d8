package pulseinfer

// #include <pulseinfer/pulseinfer.h>
import "C"

import "runtime"

// Status is a non-OK pulse_status. It is the kind of an *Error, which unwraps to it:
// errors.Is(err, pulseinfer.ErrNotFound).
type Status int32

// Recoverable conditions.
const (
	ErrNoCapacity     Status = C.PULSE_NO_CAPACITY
	ErrCancelled      Status = C.PULSE_CANCELLED
	ErrAgain          Status = C.PULSE_AGAIN
	ErrBufferTooSmall Status = C.PULSE_BUFFER_TOO_SMALL
)

// Errors.
const (
	ErrInvalidArgument    Status = C.PULSE_INVALID_ARGUMENT
	ErrNotFound           Status = C.PULSE_NOT_FOUND
	ErrIO                 Status = C.PULSE_IO
	ErrInvalidModel       Status = C.PULSE_INVALID_MODEL
	ErrUnsupported        Status = C.PULSE_UNSUPPORTED
	ErrOutOfMemory        Status = C.PULSE_OUT_OF_MEMORY
	ErrFailedPrecondition Status = C.PULSE_FAILED_PRECONDITION
	ErrInternal           Status = C.PULSE_INTERNAL
)

// Error returns the library's name of the status, such as "not found".
func (s Status) Error() string { return C.GoString(C.pulse_status_string(C.pulse_status(s))) }

// Error is a failed library call.
type Error struct {
	Status Status
	// Message is pulse_last_error() of the failing call; it names the C function.
	Message string
}

func (e *Error) Error() string { return "pulseinfer: " + e.Message + " (" + e.Status.Error() + ")" }

func (e *Error) Unwrap() error { return e.Status }

// call runs one library call and returns its non-OK status as an *Error. The thread is locked
// so that pulse_last_error, which is thread-local, is read on the thread that failed.
func call(libraryCall func() C.pulse_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if status := libraryCall(); status != C.PULSE_OK {
		return &Error{Status: Status(status), Message: C.GoString(C.pulse_last_error())}
	}
	return nil
}
