//! Egress guardrails: what a room in `allowlist` mode may reach. The room
//! has no route out; its daemon's proxy on the room's loopback hands each
//! connection to the host (its socket through the room's egress socket on
//! a local engine, else its bytes over the link), where [`policy`] decides
//! and the host dials. [`http`] reads the heads the proxy is sent;
//! [`splice`] carries a handed-over connection's bytes.

pub mod http;
pub mod policy;
pub mod splice;

/// The port the proxy listens on in the room, and what the room's
/// `HTTP_PROXY` names: squid's, the one proxy-aware tools expect. In an
/// `allowlist` room the port is the proxy's, not the room's own servers'.
pub const PROXY_PORT: u16 = 3128;

pub mod store;
