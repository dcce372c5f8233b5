//! Egress guardrails: what a room in `allowlist` mode may reach. The room
//! has no route out; its daemon's proxy on the room's loopback carries
//! each request over the link to the host, where [`policy`] decides and
//! the host dials. [`http`] reads the heads the proxy is sent.

pub mod http;
pub mod policy;

/// The port the proxy listens on in the room, and what the room's
/// `HTTP_PROXY` names: squid's, the one proxy-aware tools expect. In an
/// `allowlist` room the port is the proxy's, not the room's own servers'.
pub const PROXY_PORT: u16 = 3128;

pub mod store;
