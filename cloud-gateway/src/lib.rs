//! Duet's cloud gateway as a library, so the binary, the tests and the load tester run the
//! same code.
//!
//! Modules follow the data path of an escalation (docs/ARCHITECTURE.md, "Gateway"):
//! [`transport`] (QUIC listener, one actor per device, frame reading) → [`sessions`] (each
//! session's token context) → [`dispatch`] (the seam every LLM path sits behind: the request,
//! the outcome, `Busy`, the model's facts) → one of two paths, side by side: [`batcher`]
//! (admission by cost, queue and cut policy, the actor that owns an in-process
//! [`batcher::backend`], the embedded ONNX LLM) or [`engine`] (the pool of external engines:
//! SGLang, vLLM, llama.cpp). [`state`] is what connections share, [`config`] every setting,
//! `server` wires it all and [`http`] is the operator's side port; `limits` bounds what peers
//! can make the transport hold; [`drain`] takes the gateway
//! down gracefully; [`cli`] maps the binary's flags onto [`config::GatewayConfig`].
//! [`identity`] says who a device is (mutual TLS with a fleet CA, or the dev mode's claimed
//! id), with revocation and a per-device rate limit; [`ca_command`] is the operator's admin
//! command for the CA and device certificates; [`fleet`] serves router bundles to devices
//! (rollout by percentage, `/v1/fleet`) and [`fleet_command`] makes and publishes them.

pub mod batcher;
pub mod ca_command;
pub mod cli;
pub mod config;
pub mod dispatch;
pub mod drain;
pub mod engine;
pub mod fleet;
pub mod fleet_command;
pub mod http;
pub mod identity;
pub(crate) mod limits;
mod memory;
mod server;
pub mod sessions;
pub mod state;
pub mod transport;

pub use config::GatewayConfig;
pub use server::Gateway;
