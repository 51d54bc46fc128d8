//! The object messages of the kinds the proxy reads (Service, EndpointSlice, Node,
//! ServiceCIDR) and writes (events.k8s.io Event), numbered as upstream's `generated.proto`
//! numbers them. Fields no proxy reads and no test compares (status conditions, node
//! capacity and images, managed fields) are left out: the decoder skips them unread.

use super::meta::{IntOrString, ObjectMeta, Time};
use std::collections::BTreeMap;

/// `core.v1.Service`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Service {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<ServiceSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<ServiceStatus>,
}

/// `core.v1.ServiceSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ServiceSpec {
    #[prost(message, repeated, tag = "1")]
    pub ports: Vec<ServicePort>,
    #[prost(btree_map = "string, string", tag = "2")]
    pub selector: BTreeMap<String, String>,
    #[prost(string, optional, tag = "3")]
    pub cluster_ip: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub r#type: Option<String>,
    #[prost(string, repeated, tag = "5")]
    pub external_ips: Vec<String>,
    #[prost(string, optional, tag = "7")]
    pub session_affinity: Option<String>,
    #[prost(string, optional, tag = "8")]
    pub load_balancer_ip: Option<String>,
    #[prost(string, repeated, tag = "9")]
    pub load_balancer_source_ranges: Vec<String>,
    #[prost(string, optional, tag = "10")]
    pub external_name: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub external_traffic_policy: Option<String>,
    #[prost(int32, optional, tag = "12")]
    pub health_check_node_port: Option<i32>,
    #[prost(bool, optional, tag = "13")]
    pub publish_not_ready_addresses: Option<bool>,
    #[prost(message, optional, tag = "14")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    #[prost(string, optional, tag = "17")]
    pub ip_family_policy: Option<String>,
    #[prost(string, repeated, tag = "18")]
    pub cluster_ips: Vec<String>,
    #[prost(string, repeated, tag = "19")]
    pub ip_families: Vec<String>,
    #[prost(bool, optional, tag = "20")]
    pub allocate_load_balancer_node_ports: Option<bool>,
    #[prost(string, optional, tag = "21")]
    pub load_balancer_class: Option<String>,
    #[prost(string, optional, tag = "22")]
    pub internal_traffic_policy: Option<String>,
    #[prost(string, optional, tag = "23")]
    pub traffic_distribution: Option<String>,
}

/// `core.v1.ServicePort`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ServicePort {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub protocol: Option<String>,
    #[prost(int32, optional, tag = "3")]
    pub port: Option<i32>,
    #[prost(message, optional, tag = "4")]
    pub target_port: Option<IntOrString>,
    #[prost(int32, optional, tag = "5")]
    pub node_port: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub app_protocol: Option<String>,
}

/// `core.v1.SessionAffinityConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SessionAffinityConfig {
    #[prost(message, optional, tag = "1")]
    pub client_ip: Option<ClientIpConfig>,
}

/// `core.v1.ClientIPConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ClientIpConfig {
    #[prost(int32, optional, tag = "1")]
    pub timeout_seconds: Option<i32>,
}

/// `core.v1.ServiceStatus` (its load balancer only).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ServiceStatus {
    #[prost(message, optional, tag = "1")]
    pub load_balancer: Option<LoadBalancerStatus>,
}

/// `core.v1.LoadBalancerStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LoadBalancerStatus {
    #[prost(message, repeated, tag = "1")]
    pub ingress: Vec<LoadBalancerIngress>,
}

/// `core.v1.LoadBalancerIngress`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LoadBalancerIngress {
    #[prost(string, optional, tag = "1")]
    pub ip: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub hostname: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub ip_mode: Option<String>,
    #[prost(message, repeated, tag = "4")]
    pub ports: Vec<PortStatus>,
}

/// `core.v1.PortStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PortStatus {
    #[prost(int32, optional, tag = "1")]
    pub port: Option<i32>,
    #[prost(string, optional, tag = "2")]
    pub protocol: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub error: Option<String>,
}

/// `discovery.v1.EndpointSlice`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EndpointSlice {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, repeated, tag = "2")]
    pub endpoints: Vec<Endpoint>,
    #[prost(message, repeated, tag = "3")]
    pub ports: Vec<EndpointPort>,
    #[prost(string, optional, tag = "4")]
    pub address_type: Option<String>,
}

/// `discovery.v1.Endpoint`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Endpoint {
    #[prost(string, repeated, tag = "1")]
    pub addresses: Vec<String>,
    #[prost(message, optional, tag = "2")]
    pub conditions: Option<EndpointConditions>,
    #[prost(string, optional, tag = "3")]
    pub hostname: Option<String>,
    #[prost(message, optional, tag = "4")]
    pub target_ref: Option<ObjectReference>,
    #[prost(string, optional, tag = "6")]
    pub node_name: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub zone: Option<String>,
    #[prost(message, optional, tag = "8")]
    pub hints: Option<EndpointHints>,
}

/// `discovery.v1.EndpointConditions`: unset and false differ (unset `ready` means ready).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EndpointConditions {
    #[prost(bool, optional, tag = "1")]
    pub ready: Option<bool>,
    #[prost(bool, optional, tag = "2")]
    pub serving: Option<bool>,
    #[prost(bool, optional, tag = "3")]
    pub terminating: Option<bool>,
}

/// `discovery.v1.EndpointHints`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EndpointHints {
    #[prost(message, repeated, tag = "1")]
    pub for_zones: Vec<ForName>,
    #[prost(message, repeated, tag = "2")]
    pub for_nodes: Vec<ForName>,
}

/// `discovery.v1.ForZone` and `ForNode`, numbered alike.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ForName {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
}

/// `discovery.v1.EndpointPort`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EndpointPort {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub protocol: Option<String>,
    #[prost(int32, optional, tag = "3")]
    pub port: Option<i32>,
    #[prost(string, optional, tag = "4")]
    pub app_protocol: Option<String>,
}

/// `core.v1.ObjectReference`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ObjectReference {
    #[prost(string, optional, tag = "1")]
    pub kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub field_path: Option<String>,
}

/// `core.v1.Node`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Node {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<NodeSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<NodeStatus>,
}

/// `core.v1.NodeSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NodeSpec {
    #[prost(string, optional, tag = "1")]
    pub pod_cidr: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub external_id: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub provider_id: Option<String>,
    #[prost(bool, optional, tag = "4")]
    pub unschedulable: Option<bool>,
    #[prost(message, repeated, tag = "5")]
    pub taints: Vec<Taint>,
    #[prost(string, repeated, tag = "7")]
    pub pod_cidrs: Vec<String>,
}

/// `core.v1.Taint`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Taint {
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub effect: Option<String>,
    #[prost(message, optional, tag = "4")]
    pub time_added: Option<Time>,
}

/// `core.v1.NodeStatus` (phase and addresses).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NodeStatus {
    #[prost(string, optional, tag = "3")]
    pub phase: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub addresses: Vec<NodeAddress>,
}

/// `core.v1.NodeAddress`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NodeAddress {
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub address: Option<String>,
}

/// `networking.v1.ServiceCIDR` (its spec; the status holds only conditions).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ServiceCidr {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<ServiceCidrSpec>,
}

/// `networking.v1.ServiceCIDRSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ServiceCidrSpec {
    #[prost(string, repeated, tag = "1")]
    pub cidrs: Vec<String>,
}

/// `events.v1.Event` (no series: the proxy records single events).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Event {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub event_time: Option<Time>,
    #[prost(string, optional, tag = "4")]
    pub reporting_controller: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub reporting_instance: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub action: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub reason: Option<String>,
    #[prost(message, optional, tag = "8")]
    pub regarding: Option<ObjectReference>,
    #[prost(message, optional, tag = "9")]
    pub related: Option<ObjectReference>,
    #[prost(string, optional, tag = "10")]
    pub note: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub r#type: Option<String>,
}
