//! The tests against the real thing: rulesets loaded into a real kernel in network
//! namespaces, real packets through them, the daemon following the API-server emulator and
//! `kubectl`, cleanup and takeover of kube-proxy's layouts, and the shipped static binary.
//! They need root and `ip netns` (under `CI=true` they fail rather than skip without them).
//! One binary, so the crate is linked once and the long tests overlap with the rest.

#[path = "../common/mod.rs"]
mod common;

mod api;
mod apply;
mod cleanup;
mod compile;
mod conntrack;
mod daemon;
mod daemon_faults;
mod dataplane;
mod dataplane_affinity;
mod dataplane_cidrs;
mod dataplane_detect;
mod dataplane_dispatch;
mod dataplane_edges;
mod dataplane_policy;
mod dataplane_topology;
mod debug;
mod emulator;
mod explain;
mod explain_edges;
mod health;
mod hostile_health;
mod kdiff;
mod localhost_nodeports;
mod monitoring;
mod packages;
mod packaging;
mod packaging_image;
mod rulesets;
mod scale;
mod service_health;
mod takeover;
mod trace;
mod tracing;
mod tracing_hostile;
