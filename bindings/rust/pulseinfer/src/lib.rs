#![doc = include_str!("../README.md")]

mod buffer;
mod engine;
mod engine_params;
mod error;
mod generation;
mod library;
mod model;
mod model_info;
mod model_params;
mod router;
mod sampling_params;
mod stats;
mod strings;
mod text;

pub use pulseinfer_sys as sys;

pub use engine::{Completion, Engine};
pub use engine_params::{
    Admission, CopyExecutor, EngineParams, Eviction, HostCodec, OffloadMode, SummaryPrecision,
};
pub use error::{Error, Result};
pub use generation::{Canceller, Generation, Token};
pub use library::{abi_version, features, version, Features, ABI_VERSION};
pub use model::Model;
pub use model_info::ModelInfo;
pub use model_params::ModelParams;
pub use sampling_params::SamplingParams;
pub use stats::{EngineStats, FinishReason, RequestState, RequestStats};
pub use text::{ChatMessage, DetokenizeFlags, TokenizeFlags};
