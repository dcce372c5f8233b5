//! Egress guardrails: what a room in `allowlist` mode may reach. The room
//! has no route out; its daemon's proxy on the room's loopback carries
//! each request over the link to the host, where [`policy`] decides and
//! the host dials. [`http`] reads the heads the proxy is sent.

pub mod http;
pub mod policy;
