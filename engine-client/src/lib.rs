//! HTTP clients for the external LLM engines Duet drives: SGLang, vLLM and llama.cpp's
//! `llama-server`. The gateway's engine pool escalates to them; the router lab labels training
//! data with the LLM one of them serves. Both use this crate, and neither's other machinery
//! (the gateway's actors and QUIC server, the lab's training) comes with it.
//!
//! Every engine is driven by token ids only (never text), for the next token (or a short
//! lookahead) of a whole context; engines with a prefix cache (SGLang's radix cache, vLLM's
//! prefix caching, llama.cpp's `cache_prompt`) then prefill only the delta since the last
//! request, provided the caller keeps a session on the same worker.
//!
//! What differs between engines is only the shape of the bodies: a [`Dialect`] is a pure
//! mapping between a [`NextTokenRequest`] and one engine's JSON, tested field by field against
//! the engine's documented bodies without a server. [`client::EngineClient`] is the I/O around
//! it, [`verify`] the start-up check that an engine serves the devices' vocabulary, and
//! [`connect`] picks a worker's dialect and runs that check.
//!
//! A greedy draft (protocol v5) is checked in one request ([`DraftCheckRequest`]): SGLang and
//! vLLM give the LLM's choice at the draft's positions as prompt log-probabilities of context +
//! draft, llama.cpp, which has none, continues the context greedily for the draft's length plus
//! one. Each dialect reads its answer as the LLM's choices from the hard position on; the
//! acceptance rule over them is the gateway's, which its embedded backend applies too.
//!
//! The router lab's teacher asks for the LLM's choice at every position of a sequence
//! ([`PromptChoicesRequest`]). That mapping is a trait of its own,
//! [`prompt_choices::PromptChoicesDialect`], which only the lab uses: the escalation path's
//! [`Dialect`] does not carry it. It is implemented beside each dialect, on the same parsers as
//! the draft check, so the lab's teacher and the gateway's escalations cannot drift apart in
//! how they ask an engine for a greedy token.

pub mod client;
pub mod connect;
mod dialect;
mod error;
pub mod llamacpp;
pub mod prompt_choices;
mod request;
pub mod sglang;
mod spec;
#[cfg(test)]
mod testing;
pub mod verify;
pub mod vllm;

pub(crate) use dialect::{aligned_positions, first_listed_model, parse_json, token_id};
pub use dialect::Dialect;
pub use error::EngineError;
pub use request::{DraftCheckRequest, EngineModel, EngineReply, EngineToken, HttpCall, NextTokenRequest, PromptChoice, PromptChoicesRequest};
pub use spec::{EngineKind, EngineSpec};
