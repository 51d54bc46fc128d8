//! Per-object changes: what every source (manifests, the API server) delivers to the sync
//! thread, already validated, and how the model files them, noting only real differences.

use super::cidrs::service_cidrs_from_api;
use super::{ApiObject, EndpointSliceInfo, Model, NodeInfo, ObjectError, ObjectKey, ServicePort, endpoints};
use ipnet::IpNet;

/// The kinds of object the proxy follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// `v1.Service`.
    Service,
    /// `discovery.k8s.io/v1.EndpointSlice`.
    EndpointSlice,
    /// `v1.Node` (only this node's).
    Node,
    /// `networking.k8s.io/v1.ServiceCIDR`.
    ServiceCidr,
}

impl ObjectKind {
    /// The API's kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Service => "Service",
            ObjectKind::EndpointSlice => "EndpointSlice",
            ObjectKind::Node => "Node",
            ObjectKind::ServiceCidr => "ServiceCIDR",
        }
    }
}

/// Identifies one object: its kind, namespace (empty for a Node or a ServiceCIDR) and name.
pub type ObjectId = (ObjectKind, ObjectKey);

/// One object's current state, validated; `None` means deleted (or nothing to proxy, such as
/// a headless Service or an FQDN slice, which the model treats alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectChange {
    /// A Service's ports.
    Service(ObjectKey, Option<Vec<ServicePort>>),
    /// An EndpointSlice, keyed by its own namespace and name.
    Slice(ObjectKey, Option<EndpointSliceInfo>),
    /// This node.
    Node(Option<NodeInfo>),
    /// A ServiceCIDR's ranges, keyed by its name (it is cluster-scoped).
    ServiceCidr(String, Option<Vec<IpNet>>),
}

impl ObjectChange {
    /// One line saying what the change is about, for the debug log.
    pub fn describe(&self) -> String {
        match self {
            ObjectChange::Service((ns, name), ports) => match ports {
                Some(p) => format!("Service {ns}/{name}: {} ports", p.len()),
                None => format!("Service {ns}/{name} deleted"),
            },
            ObjectChange::Slice((ns, name), info) => match info {
                Some(i) => format!("EndpointSlice {ns}/{name} of {}: {} endpoints", i.service, i.endpoints.len()),
                None => format!("EndpointSlice {ns}/{name} deleted"),
            },
            ObjectChange::Node(node) => match node {
                Some(n) => format!("Node: addresses {:?}", n.addresses),
                None => "Node deleted".to_string(),
            },
            ObjectChange::ServiceCidr(name, cidrs) => match cidrs {
                Some(c) => format!("ServiceCIDR {name}: {c:?}"),
                None => format!("ServiceCIDR {name} deleted"),
            },
        }
    }

    /// Validates an object for node `node_name`; `Ok(None)` for another node's Node object.
    pub fn from_api(obj: &ApiObject, node_name: &str) -> Result<Option<ObjectChange>, ObjectError> {
        ObjectChange::from_api_for(obj, node_name, None)
    }

    /// As [`ObjectChange::from_api`] for the proxy named `proxy_name` (`--service-proxy-name`):
    /// a Service it does not serve is one with nothing to proxy.
    pub fn from_api_for(
        obj: &ApiObject,
        node_name: &str,
        proxy_name: Option<&str>,
    ) -> Result<Option<ObjectChange>, ObjectError> {
        Ok(Some(match obj {
            ApiObject::Service(svc) => {
                let key = endpoints::object_key("Service", &svc.metadata)?;
                ObjectChange::Service(key, ServicePort::from_api_for(svc, proxy_name)?.map(|(_, ports)| ports))
            }
            ApiObject::EndpointSlice(slice) => {
                let key = endpoints::object_key("EndpointSlice", &slice.metadata)?;
                ObjectChange::Slice(key, EndpointSliceInfo::from_api(slice)?)
            }
            ApiObject::Node(node) if node.metadata.name.as_deref() == Some(node_name) => {
                ObjectChange::Node(Some(NodeInfo::from_api(node)?))
            }
            ApiObject::Node(_) => return Ok(None),
            ApiObject::ServiceCidr(obj) => {
                let (name, cidrs) = service_cidrs_from_api(obj)?;
                ObjectChange::ServiceCidr(name, Some(cidrs))
            }
        }))
    }

    /// The deletion of object `id`.
    pub fn deleted(id: &ObjectId) -> ObjectChange {
        match id.0 {
            ObjectKind::Service => ObjectChange::Service(id.1.clone(), None),
            ObjectKind::EndpointSlice => ObjectChange::Slice(id.1.clone(), None),
            ObjectKind::Node => ObjectChange::Node(None),
            ObjectKind::ServiceCidr => ObjectChange::ServiceCidr(id.1.1.clone(), None),
        }
    }

    /// The Service this change is about, as upstream's change trackers key pending changes:
    /// a Service's own key, an EndpointSlice's Service (for a deleted slice, the one `model`
    /// filed it under, so call this before filing); `None` for other kinds.
    pub fn service(&self, model: &Model) -> Option<ObjectKey> {
        match self {
            ObjectChange::Service(key, _) => Some(key.clone()),
            ObjectChange::Slice((ns, _), Some(info)) => Some((ns.clone(), info.service.clone())),
            ObjectChange::Slice(key, None) => Some((key.0.clone(), model.slice_owner.get(key)?.clone())),
            ObjectChange::Node(_) | ObjectChange::ServiceCidr(..) => None,
        }
    }

    /// The kind of object this is about.
    pub fn kind(&self) -> ObjectKind {
        match self {
            ObjectChange::Service(..) => ObjectKind::Service,
            ObjectChange::Slice(..) => ObjectKind::EndpointSlice,
            ObjectChange::Node(_) => ObjectKind::Node,
            ObjectChange::ServiceCidr(..) => ObjectKind::ServiceCidr,
        }
    }

    /// Which object this is about (this node's Node has one id, whether present or deleted).
    pub fn id(&self) -> ObjectId {
        match self {
            ObjectChange::Service(key, _) => (ObjectKind::Service, key.clone()),
            ObjectChange::Slice(key, _) => (ObjectKind::EndpointSlice, key.clone()),
            // Only this node's object is followed: its update and its deletion are one object.
            ObjectChange::Node(_) => (ObjectKind::Node, (String::new(), String::new())),
            ObjectChange::ServiceCidr(name, _) => (ObjectKind::ServiceCidr, (String::new(), name.clone())),
        }
    }
}

impl Model {
    /// Files one object's new state; returns whether anything the rules depend on changed
    /// (an update identical to what is filed changes nothing and marks nothing).
    pub fn file(&mut self, change: ObjectChange) -> bool {
        match change {
            ObjectChange::Service(key, mut ports) => {
                if self.without_external_ips {
                    ports.iter_mut().flatten().for_each(|p| p.external_ips.clear());
                }
                if self.services.get(&key) == ports.as_ref() {
                    return false;
                }
                self.changes.services.insert(key.clone());
                match ports {
                    Some(ports) => self.services.insert(key, ports),
                    None => self.services.remove(&key),
                };
            }
            ObjectChange::Slice(key, mut info) => {
                // The trigger time is a fact about this change, not about the slice: it is
                // noted for the sync that applies the change and never stored.
                let trigger = info.as_mut().and_then(|i| i.trigger_time.take().map(|t| (i.family, t)));
                if self.slice(&key) == info.as_ref() {
                    return false;
                }
                self.changes.trigger_times.extend(trigger);
                match info {
                    Some(info) => self.upsert_slice(info),
                    None => self.delete_slice(&key),
                }
            }
            ObjectChange::Node(node) => {
                // Only whether the node is eligible for load balancers changed: `/healthz`
                // reads that from the model; the rules stay as they are.
                let same = match (&self.node, &node) {
                    (Some(a), Some(b)) => a.same_for_rules(b),
                    (a, b) => a.is_none() && b.is_none(),
                };
                self.node = node;
                if same {
                    return false;
                }
                self.changes.global = true;
            }
            ObjectChange::ServiceCidr(name, cidrs) => return self.file_service_cidr(name, cidrs),
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ApiObject, Model};
    use serde_json::json;

    fn service(name: &str) -> ApiObject {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"clusterIP": "172.30.0.9", "externalIPs": ["198.51.100.9"], "ports": [{"port": 80}]}});
        ApiObject::from_json(svc).unwrap().unwrap()
    }

    fn slice(name: &str, service: &str, addresses: &[&str]) -> ApiObject {
        let eps: Vec<_> = addresses.iter().map(|a| json!({"addresses": [a]})).collect();
        let s = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "ns", "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4", "ports": [{"port": 80}], "endpoints": eps});
        ApiObject::from_json(s).unwrap().unwrap()
    }

    #[test]
    fn the_endpoint_count_follows_slices_replaced_moved_and_deleted() {
        let mut model = Model::default();
        model.apply(&slice("a-1", "a", &["10.0.0.1", "10.0.0.2"]), "node-a").unwrap();
        model.apply(&slice("a-2", "a", &["10.0.0.3"]), "node-a").unwrap();
        model.apply(&slice("b-1", "b", &["10.0.1.1"]), "node-a").unwrap();
        assert_eq!(model.endpoint_count(), 4);
        model.apply(&slice("a-1", "a", &["10.0.0.1"]), "node-a").unwrap();
        assert_eq!(model.endpoint_count(), 3, "a slice replaced by a smaller one");
        model.apply(&slice("a-2", "b", &["10.0.1.2", "10.0.1.3"]), "node-a").unwrap();
        assert_eq!(model.endpoint_count(), 4, "a slice moved to another Service");
        model.delete_slice(&("ns".into(), "b-1".into()));
        model.delete_slice(&("ns".into(), "gone".into()));
        assert_eq!(model.endpoint_count(), 3);
    }

    #[test]
    fn external_ips_are_dropped_from_services_filed_before_and_after_the_gate_is_off() {
        let mut model = Model::default();
        model.apply(&service("before"), "node-a").unwrap();
        model.take_changes();
        assert!(model.services.values().flatten().all(|p| p.externally_accessible()));
        model.set_external_ips(false);
        assert_eq!(model.take_changes().services.len(), 1, "the service whose addresses went is a change");
        model.apply(&service("after"), "node-a").unwrap();
        assert_eq!(model.services.len(), 2);
        for p in model.services.values().flatten() {
            assert!(p.external_ips.is_empty() && !p.externally_accessible(), "{p:?}");
        }
    }
}
