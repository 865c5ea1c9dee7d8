//! A submitted request, as an iterator of its generated tokens.

use std::iter::FusedIterator;
use std::{mem, ptr};

use pulseinfer_sys as sys;

use crate::engine::Engine;
use crate::error::{check, Error, Result};
use crate::router::Event;
use crate::stats::RequestStats;

/// A generated token: its id, and the text it adds to the generation's text (whole UTF-8
/// characters only, so it may be empty: half a character, a control token, or text that may
/// begin a stop string waits for a later token).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Token {
    pub id: i32,
    pub text: String,
}

/// A request queued on an [`Engine`]. Iterating steps the engine on the calling thread (which
/// also advances the engine's other requests) until this request's next token; the iterator
/// ends when the request finishes or is cancelled. Dropping an unfinished generation cancels
/// it, and dropping any generation releases its request.
///
/// A failed step, or a request that fails, gives one `Err` and ends the iterator.
#[derive(Debug)]
pub struct Generation<'e> {
    engine: &'e Engine,
    id: u64,
    done: bool,
}

impl<'e> Generation<'e> {
    pub(crate) fn new(engine: &'e Engine, id: u64) -> Self {
        Generation { engine, id, done: false }
    }

    /// The request's id, unique within its engine.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Cancels the request: it leaves the batch before the next step, keeps its tokens so far,
    /// and the iterator ends. No effect when it already finished.
    pub fn cancel(&self) -> Result<()> {
        self.canceller().cancel()
    }

    /// A handle that cancels this request from another thread while this one iterates.
    pub fn canceller(&self) -> Canceller<'e> {
        Canceller { engine: self.engine, id: self.id }
    }

    /// The request's state, finish reason, token counts and timings.
    pub fn stats(&self) -> Result<RequestStats> {
        let mut stats = sys::pulse_request_stats {
            struct_size: mem::size_of::<sys::pulse_request_stats>() as u32,
            ..Default::default()
        };
        // SAFETY: the engine is live and stats is a struct of the size it declares.
        check(unsafe { sys::pulse_request_stats_get(self.engine.as_ptr(), self.id, &mut stats) })?;
        Ok(RequestStats::from_raw(&stats))
    }

    fn token(&self, event: Event) -> Result<Token> {
        if event.failed {
            Err(self.failure())
        } else {
            Ok(Token { id: event.token, text: event.text })
        }
    }

    /// The error the failed request finished with, and its message.
    fn failure(&self) -> Error {
        let mut count = 0;
        // SAFETY: a size query (no buffer); the engine is live.
        let status = unsafe {
            sys::pulse_request_result(self.engine.as_ptr(), self.id, ptr::null_mut(), 0, &mut count)
        };
        Error::last(status)
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<Token>;

    fn next(&mut self) -> Option<Self::Item> {
        let router = self.engine.router();
        while !self.done {
            if let Some(event) = router.pop(self.id) {
                self.done = event.finished;
                return Some(self.token(event));
            }
            // A cancelled request gets no more events.
            if router.is_cancelled(self.id) {
                break;
            }
            match self.engine.step() {
                // A step returns after delivering its events, and waits for a concurrent step
                // (and its deliveries): with nothing pending, every event of this request is
                // in its queue.
                Ok(0) => self.done = router.is_empty(self.id),
                Ok(_) => {}
                Err(error) => {
                    self.done = true;
                    return Some(Err(error));
                }
            }
        }
        self.done = true;
        None
    }
}

impl FusedIterator for Generation<'_> {}

impl Drop for Generation<'_> {
    fn drop(&mut self) {
        self.engine.router().close(self.id);
        // Neither call can fail for a request this generation owns: cancelling a finished
        // request has no effect, and a cancelled request is finished.
        // SAFETY: the engine is live (borrowed).
        unsafe {
            sys::pulse_request_cancel(self.engine.as_ptr(), self.id);
            sys::pulse_request_release(self.engine.as_ptr(), self.id);
        }
    }
}

/// Cancels one request of an engine from any thread; see [`Generation::cancel`].
#[derive(Clone, Copy, Debug)]
pub struct Canceller<'e> {
    engine: &'e Engine,
    id: u64,
}

impl Canceller<'_> {
    /// Cancels the request; no effect when it already finished.
    /// [`Error::NotFound`] once its generation is dropped.
    pub fn cancel(&self) -> Result<()> {
        // SAFETY: the engine is live (borrowed).
        check(unsafe { sys::pulse_request_cancel(self.engine.as_ptr(), self.id) })?;
        self.engine.router().mark_cancelled(self.id);
        Ok(())
    }
}
