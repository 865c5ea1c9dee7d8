//! What the loaded library is: its version, ABI version and features.

use std::ffi::CStr;

use bitflags::bitflags;
use pulseinfer_sys as sys;

/// The ABI version this binding was generated against; [`abi_version`] is the loaded library's.
pub const ABI_VERSION: i32 = sys::PULSE_ABI_VERSION;

/// The library's version, "MAJOR.MINOR.PATCH".
pub fn version() -> &'static str {
    // SAFETY: pulse_version returns a static, NUL-terminated string, never NULL.
    let version = unsafe { CStr::from_ptr(sys::pulse_version()) };
    version.to_str().expect("the library's version is ASCII")
}

/// The loaded library's ABI version; equal to [`ABI_VERSION`] (the SONAME carries it).
pub fn abi_version() -> i32 {
    // SAFETY: no arguments, no state.
    unsafe { sys::pulse_abi_version() }
}

bitflags! {
    /// What the library was built with and found (`pulse_features()`). Bits of later versions
    /// that this binding does not name are left out.
    pub struct Features: u64 {
        /// The CPU backend is built.
        const CPU = sys::PULSE_FEATURE_CPU;
        /// The CUDA backend is built.
        const CUDA_COMPILED = sys::PULSE_FEATURE_CUDA_COMPILED;
        /// The CUDA backend is built and a CUDA device is present.
        const CUDA_DEVICE = sys::PULSE_FEATURE_CUDA_DEVICE;
    }
}

/// The library's features.
pub fn features() -> Features {
    // SAFETY: no arguments, no state.
    Features::from_bits_truncate(unsafe { sys::pulse_features() })
}
