//! Routing: which tokens the device asks the cloud about, and where that decision comes from.
//!
//! Why a folder: deciding is one job with several sources. [`router`] holds the policies the
//! decode loop calls at each token (confidence, random, the trained MLP) behind one trait;
//! [`router_file`] is the trained router as a self-describing file, checked against the running
//! SLM, its score pooled with the SLM's own confidence where the file says so ([`pooled`]);
//! [`shipped_router`] is the router compiled into the binary (a newer one arrives in a
//! fleet bundle: `crate::fleet`, which sits above both routing and the link); [`rate`] holds
//! the device's escalation share near its target by moving the threshold the policies are read
//! against. Arrows go one way:
//! the others use `router_file`, which uses only `pooled`, and nothing here uses the decode
//! loop (which uses routing, and re-exports the rate controller it applies).

pub mod pooled;
pub mod rate;
pub mod router;
pub mod router_file;
pub mod shipped_router;
