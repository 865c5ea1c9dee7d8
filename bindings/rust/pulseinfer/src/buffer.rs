//! The header's output-buffer convention: a call with no buffer asks for the size, and a
//! second call with room for the result fills it.

use std::os::raw::c_char;
use std::ptr;

use pulseinfer_sys as sys;

use crate::error::{check, Error, Result};

/// Tokens from `fill(buffer, capacity, out_count)`, a call that follows the convention.
pub(crate) fn read_tokens(
    fill: impl FnMut(*mut i32, usize, &mut usize) -> sys::pulse_status,
) -> Result<Vec<i32>> {
    read(0, fill)
}

/// Text from `fill(buffer, capacity, out_len)`, a call that follows the convention. Bytes that
/// are not UTF-8 become U+FFFD.
pub(crate) fn read_text(
    mut fill: impl FnMut(*mut c_char, usize, &mut usize) -> sys::pulse_status,
) -> Result<String> {
    // The capacity includes the NUL that the length does not count.
    let bytes = read::<u8>(1, |buffer, capacity, len| fill(buffer.cast(), capacity, len))?;
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned()))
}

fn read<T: Copy + Default>(
    terminator: usize,
    mut fill: impl FnMut(*mut T, usize, &mut usize) -> sys::pulse_status,
) -> Result<Vec<T>> {
    let mut size = 0;
    match fill(ptr::null_mut(), 0, &mut size) {
        sys::PULSE_OK => return Ok(Vec::new()),
        sys::PULSE_BUFFER_TOO_SMALL => {}
        status => return Err(Error::last(status)),
    }
    let mut buffer = vec![T::default(); size + terminator];
    check(fill(buffer.as_mut_ptr(), buffer.len(), &mut size))?;
    buffer.truncate(size);
    Ok(buffer)
}
