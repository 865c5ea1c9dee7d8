//! Token events from the library's callback to the generation they belong to.
//!
//! Every request of an engine gets the same callback, with the engine's one `Router` as its
//! user_data; the router keeps a queue of events for each live generation, by request id. So
//! the user_data outlives every event the library can still deliver (the engine is freed only
//! when no step runs), and an event that arrives after its generation was dropped finds no
//! queue and is let go: the library may deliver one after its request was cancelled and
//! released, when that raced with the delivery on another thread.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::mem;
use std::os::raw::c_int;
use std::slice;
use std::sync::{Mutex, MutexGuard, PoisonError};

use pulseinfer_sys as sys;

/// One `pulse_token_event`, copied.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) token: i32,
    pub(crate) text: String,
    pub(crate) finished: bool,
    /// The request failed: this last event has no token.
    pub(crate) failed: bool,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Event>,
    /// Cancelled through this binding: no event is to come.
    cancelled: bool,
}

#[derive(Default)]
pub(crate) struct Router {
    queues: Mutex<HashMap<u64, Queue>>,
}

impl Router {
    /// Runs `submit`, which returns a new request's id, with the router locked, so that the
    /// request's queue exists before another thread's step can deliver its first event.
    pub(crate) fn open<E>(&self, submit: impl FnOnce() -> Result<u64, E>) -> Result<u64, E> {
        let mut queues = self.lock();
        let id = submit()?;
        queues.insert(id, Queue::default());
        Ok(id)
    }

    pub(crate) fn close(&self, id: u64) {
        self.lock().remove(&id);
    }

    pub(crate) fn pop(&self, id: u64) -> Option<Event> {
        self.lock().get_mut(&id)?.events.pop_front()
    }

    pub(crate) fn is_empty(&self, id: u64) -> bool {
        self.lock().get(&id).map_or(true, |queue| queue.events.is_empty())
    }

    pub(crate) fn mark_cancelled(&self, id: u64) {
        if let Some(queue) = self.lock().get_mut(&id) {
            queue.cancelled = true;
        }
    }

    pub(crate) fn is_cancelled(&self, id: u64) -> bool {
        self.lock().get(&id).map_or(true, |queue| queue.cancelled)
    }

    pub(crate) fn user_data(&self) -> *mut c_void {
        (self as *const Router).cast_mut().cast()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Queue>> {
        // A panic never leaves the map half-changed, so a poisoned lock is still good.
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `pulse_token_callback` of every request.
pub(crate) unsafe extern "C" fn on_token(
    user_data: *mut c_void,
    event: *const sys::pulse_token_event,
) -> c_int {
    // SAFETY: user_data is the engine's Router (see the module's comment), and the event is
    // valid during the call.
    let (router, event) = unsafe { (&*user_data.cast::<Router>(), &*event) };
    let text_end = mem::offset_of!(sys::pulse_token_event, text_len) + mem::size_of::<usize>();
    let text = if event.struct_size as usize >= text_end && !event.text.is_null() {
        // SAFETY: text holds text_len bytes, valid during the call.
        let bytes = unsafe { slice::from_raw_parts(event.text.cast::<u8>(), event.text_len) };
        String::from_utf8_lossy(bytes).into_owned()
    } else {
        String::new()
    };
    if let Some(queue) = router.lock().get_mut(&event.request_id) {
        queue.events.push_back(Event {
            token: event.token,
            text,
            finished: event.finished != 0,
            failed: event.finish_reason as sys::pulse_finish_reason_code == sys::PULSE_FINISH_ERROR,
        });
    }
    0
}
