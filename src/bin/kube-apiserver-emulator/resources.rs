//! The fixed table of resource types the emulator serves, with the facts discovery and routing need.

/// One served resource type.
#[derive(Debug)]
pub struct Resource {
    /// URL plural, e.g. `services`; also the store's key for the type.
    pub plural: &'static str,
    /// API group; empty for the core group.
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// Object kind, e.g. `Service`.
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names kubectl accepts.
    pub short_names: &'static [&'static str],
    /// Field paths usable in field selectors besides `metadata.name`/`metadata.namespace`.
    pub spec_fields: &'static [&'static str],
    /// A top-level field and a value of the wrong type, for the "malformed" fault.
    pub malformed: (&'static str, &'static str),
}

impl Resource {
    /// `apiVersion` as objects spell it: `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The kind of a list of these objects.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

/// Every resource type known to the emulator.
pub const ALL: &[Resource] = &[
    Resource {
        plural: "services",
        group: "",
        version: "v1",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        spec_fields: &["spec.clusterIP", "spec.type"],
        malformed: ("spec", r#"{"ports":"not-a-list"}"#),
    },
    Resource {
        plural: "nodes",
        group: "",
        version: "v1",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        spec_fields: &[],
        malformed: ("status", r#"{"addresses":"not-a-list"}"#),
    },
    Resource {
        plural: "namespaces",
        group: "",
        version: "v1",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        spec_fields: &[],
        malformed: ("spec", r#"{"finalizers":7}"#),
    },
    Resource {
        plural: "endpointslices",
        group: "discovery.k8s.io",
        version: "v1",
        kind: "EndpointSlice",
        namespaced: true,
        short_names: &[],
        spec_fields: &[],
        malformed: ("endpoints", r#""not-a-list""#),
    },
    Resource {
        plural: "servicecidrs",
        group: "networking.k8s.io",
        version: "v1",
        kind: "ServiceCIDR",
        namespaced: false,
        short_names: &[],
        spec_fields: &[],
        malformed: ("spec", r#"{"cidrs":"not-a-list"}"#),
    },
    // Where the proxy records its Starting event, and where tests and kubectl read it back.
    Resource {
        plural: "events",
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        namespaced: true,
        short_names: &[],
        spec_fields: &[],
        malformed: ("regarding", r#""not-an-object""#),
    },
];

/// Which resources this run serves, which field selectors it supports and how it lists (flags
/// can hide some).
#[derive(Debug, Clone)]
pub struct Catalog {
    /// Serve `servicecidrs` (a server with MultiCIDRServiceAllocator).
    pub servicecidrs: bool,
    /// Support `spec.clusterIP`/`spec.type` field selectors on services (servers from 1.31).
    pub service_field_selectors: bool,
    /// Answer resourceVersion=0 lists whole whatever their limit, as the watch cache does.
    pub watch_cache: bool,
}

impl Catalog {
    /// The served resources, in table order.
    pub fn served(&self) -> impl Iterator<Item = &'static Resource> + '_ {
        ALL.iter().filter(|r| self.servicecidrs || r.plural != "servicecidrs")
    }

    /// The served resource with this group, version and plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
        self.served().find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// The served resource for an object's `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&'static Resource> {
        self.served().find(|r| r.kind == kind && r.api_version() == api_version)
    }

    /// Whether `field` may appear in a field selector for `res`.
    pub fn field_supported(&self, res: &Resource, field: &str) -> bool {
        match field {
            "metadata.name" | "metadata.namespace" => true,
            _ => self.service_field_selectors && res.spec_fields.contains(&field),
        }
    }
}
