//! Duet's system tests live in `tests/`: the device, the lab and the gateway together, each as
//! a real process or library over real QUIC on loopback, on the real models. This crate has no
//! code of its own; it exists so that tests spanning the crates sit in one neutral place.
