//! `--feature-gates` and the file's `featureGates`: the gates kube-proxy knows, parsed and
//! checked as its feature gate does (unknown names and locked gates set away from their
//! default are refused).
//!
//! Of the gates the newest kube-proxy reads in its proxy code, AllowServiceExternalIPs can be
//! changed (off: Services' `externalIPs` are not served, `Config::external_ips`); the others
//! (`PreferSameTrafficDistribution`, `NFTablesProxyMode`, `MultiCIDRServiceAllocator`, ...) are
//! GA and locked on, which is what this proxy implements.

use std::collections::BTreeMap;

/// kube-proxy's gates (Kubernetes 1.36's list, every component's, since kube-proxy registers
/// them all): `Name=default`, with `!` when the gate is locked to its default.
const KUBERNETES: &str = "\
    APIResponseCompression=true APIServerIdentity=true APIServerTracing=true! \
    APIServingWithRoutine=false AggregatedDiscoveryRemoveBetaType=true! AllowDNSOnlyNodeCSR=true \
    AllowInsecureKubeletCertificateSigningRequests=true \
    AllowOverwriteTerminationGracePeriodSeconds=true! AllowParsingUserUIDFromCertAuth=true \
    AllowUnsafeMalformedObjectDeletion=false AnonymousAuthConfigurableEndpoints=true! \
    AnyVolumeDataSource=true! AtomicFIFO=true AuthorizeNodeWithSelectors=true! \
    AuthorizePodWebsocketUpgradeCreatePermission=true AuthorizeWithSelectors=true! BtreeWatchCache=true! \
    CBORServingAndStorage=false CPUManagerPolicyAlphaOptions=false CPUManagerPolicyBetaOptions=true \
    CPUManagerPolicyOptions=true! CRDObservedGenerationTracking=false CRDValidationRatcheting=true! \
    CSIServiceAccountTokenSecrets=true! CSIVolumeHealth=false ChangeContainerStatusOnKubeletRestart=true \
    ClearingNominatedNodeNameAfterBinding=true ClientsAllowCBOR=false ClientsPreferCBOR=false \
    CloudControllerManagerWatchBasedRoutesReconciliation=false CloudControllerManagerWebhook=false \
    ClusterTrustBundle=false ClusterTrustBundleProjection=false ComponentFlagz=false \
    ComponentStatusz=false ConcurrentWatchObjectDecode=false ConsistentListFromCache=true! \
    ConstrainedImpersonation=false ContainerCheckpoint=true ContainerRestartRules=true \
    ContainerStopSignals=false CoordinatedLeaderElection=false CrossNamespaceVolumeDataSource=false \
    CustomCPUCFSQuotaPeriod=false CustomResourceFieldSelectors=true! DRAAdminAccess=true \
    DRAConsumableCapacity=false DRADeviceBindingConditions=false DRADeviceTaintRules=false \
    DRADeviceTaints=false DRAExtendedResource=false DRAPartitionableDevices=false \
    DRAPrioritizedList=true DRAResourceClaimDeviceStatus=true DRASchedulerFilterTimeout=true \
    DeclarativeValidation=true DeclarativeValidationTakeover=false \
    DeploymentReplicaSetTerminatingReplicas=true DetectCacheInconsistency=true \
    DisableAllocatorDualWrite=true! DisableCPUQuotaWithExclusiveCPUs=true \
    DisableNodeKubeProxyVersion=true DynamicResourceAllocation=true! EnvFiles=true EventedPLEG=false \
    ExecProbeTimeout=true! ExternalServiceAccountTokenSigner=true GangScheduling=false \
    GenericWorkload=false GitRepoVolumeDriver=true GracefulNodeShutdown=true \
    GracefulNodeShutdownBasedOnPodPriority=true HPAConfigurableTolerance=true HPAScaleToZero=false \
    HonorPVReclaimPolicy=true! HostnameOverride=true ImageMaximumGCAge=true! ImageVolume=true \
    ImageVolumeWithDigest=false InOrderInformers=true InOrderInformersBatchProcess=true \
    InPlacePodLevelResourcesVerticalScaling=false InPlacePodVerticalScaling=true! \
    InPlacePodVerticalScalingAllocatedStatus=false InPlacePodVerticalScalingExclusiveCPUs=false \
    InPlacePodVerticalScalingExclusiveMemory=false InformerResourceVersion=true \
    JobBackoffLimitPerIndex=true! JobManagedBy=true! JobPodReplacementPolicy=true! \
    JobSuccessPolicy=true! KMSv1=true KubeletCgroupDriverFromCRI=true! KubeletCrashLoopBackOffMax=true \
    KubeletEnsureSecretPulledImages=true KubeletFineGrainedAuthz=true! KubeletInUserNamespace=false \
    KubeletPSI=true KubeletPodResourcesDynamicResources=true KubeletPodResourcesGet=true \
    KubeletPodResourcesListUseActivePods=true KubeletRegistrationGetOnExistsOnly=true \
    KubeletSeparateDiskGC=true KubeletServiceAccountTokenForCredentialProviders=true \
    KubeletTracing=true! ListFromCacheSnapshot=true LocalStorageCapacityIsolationFSQuotaMonitoring=false \
    LogarithmicScaleDown=true! MatchLabelKeysInPodAffinity=true! MatchLabelKeysInPodTopologySpread=true \
    MatchLabelKeysInPodTopologySpreadSelectorMerge=true MaxUnavailableStatefulSet=true MemoryQoS=false \
    MultiCIDRServiceAllocator=true! MutableCSINodeAllocatableCount=true MutablePVNodeAffinity=false \
    MutablePodResourcesForSuspendedJobs=false MutableSchedulingDirectivesForSuspendedJobs=false \
    MutatingAdmissionPolicy=false NFTablesProxyMode=true! NodeDeclaredFeatures=false \
    NodeInclusionPolicyInPodTopologySpread=true! NodeLogQuery=false NodeSwap=true! \
    NominatedNodeNameForExpectation=true OpenAPIEnums=true OpportunisticBatching=true \
    OrderedNamespaceDeletion=true! PodAndContainerStatsFromCRI=false PodCertificateRequest=false \
    PodDeletionCost=true PodLevelResources=true PodLifecycleSleepAction=true! \
    PodLifecycleSleepActionAllowZero=true! PodLogsQuerySplitStreams=false \
    PodObservedGenerationTracking=true! PodReadyToStartContainersCondition=true \
    PodSchedulingReadiness=true! PodTopologyLabelsAdmission=true PortForwardWebsockets=true \
    PreferSameTrafficDistribution=true! PreventStaticPodAPIReferences=true ProcMountType=true \
    QOSReserved=false RecoverVolumeExpansionFailure=true! RecursiveReadOnlyMounts=true! \
    ReduceDefaultCrashLoopBackOffDecay=false RelaxedDNSSearchValidation=true! \
    RelaxedEnvironmentVariableValidation=true! RelaxedServiceNameValidation=true \
    ReloadKubeletServerCertificateFile=true RemoteRequestHeaderUID=true \
    ResilientWatchCacheInitialization=true! ResourceHealthStatus=true ResourceHealthStatusMessage=true \
    RestartAllContainersOnContainerExits=false RetryGenerateName=true! \
    RotateKubeletServerCertificate=true RuntimeClassInImageCriApi=false SELinuxChangePolicy=true \
    SELinuxMount=false SELinuxMountReadWriteOncePod=true SchedulerAsyncAPICalls=false \
    SchedulerAsyncPreemption=true SchedulerPopFromBackoffQ=true SchedulerQueueingHints=true! \
    SeparateCacheWatchRPC=true SeparateTaintEvictionController=true! \
    ServiceAccountNodeAudienceRestriction=true ServiceAccountTokenJTI=true! \
    ServiceAccountTokenNodeBinding=true! ServiceAccountTokenNodeBindingValidation=true! \
    ServiceAccountTokenPodNodeInfo=true! SidecarContainers=true! SizeBasedListCostEstimate=true \
    StatefulSetSemanticRevisionComparison=true StorageCapacityScoring=false StorageNamespaceIndex=true \
    StorageVersionAPI=false StorageVersionHash=true StorageVersionMigrator=false \
    StreamingCollectionEncodingToJSON=true! StreamingCollectionEncodingToProtobuf=true! \
    StrictIPCIDRValidation=false StructuredAuthenticationConfiguration=true! \
    StructuredAuthenticationConfigurationEgressSelector=true \
    StructuredAuthenticationConfigurationJWKSMetrics=true SupplementalGroupsPolicy=true! \
    SystemdWatchdog=true! TaintTolerationComparisonOperators=false \
    TokenRequestServiceAccountUIDValidation=true TopologyManagerPolicyAlphaOptions=false \
    TopologyManagerPolicyBetaOptions=true TopologyManagerPolicyOptions=true! \
    TranslateStreamCloseWebsocketRequests=true UnauthenticatedHTTP2DOSMitigation=true \
    UnknownVersionInteroperabilityProxy=false UnlockWhileProcessingFIFO=true \
    UserNamespacesHostNetworkSupport=false UserNamespacesSupport=true VolumeAttributesClass=true! \
    VolumeLimitScaling=false WatchCacheInitializationPostStartHook=true WatchList=true \
    WatchListClient=true WinDSR=true! WinOverlay=true! WindowsCPUAndMemoryAffinity=false \
    WindowsGracefulNodeShutdown=true WindowsHostNetwork=false \
";

/// Gates newer than that list: AllowServiceExternalIPs (1.36, deprecated, on) and
/// KubeProxyIPVS (on; IPVS mode's, deprecated).
const NEWER: &str = "AllowServiceExternalIPs=true KubeProxyIPVS=true";

/// Gates component-base adds for logging, and the two that set every alpha or beta gate.
const COMPONENT_BASE: &str =
    "AllAlpha=false AllBeta=false ContextualLogging=true LoggingAlphaOptions=false LoggingBetaOptions=true";

/// The gate that keeps Services' `externalIPs` served (deprecated in 1.36, on by default; off,
/// kube-proxy programs none).
pub const ALLOW_SERVICE_EXTERNAL_IPS: &str = "AllowServiceExternalIPs";

/// The gate the alpha logging options (`--log-*-split-stream`, `--log-*-info-buffer-size`) need.
pub const LOGGING_ALPHA_OPTIONS: &str = "LoggingAlphaOptions";

/// One known gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Its name.
    pub name: &'static str,
    /// Whether it is on when nothing sets it.
    pub default: bool,
    /// Whether it cannot be set away from its default.
    pub locked: bool,
}

/// Every gate kube-proxy knows.
pub fn known() -> impl Iterator<Item = Gate> {
    let lists = [KUBERNETES, NEWER, COMPONENT_BASE];
    lists.into_iter().flat_map(str::split_whitespace).filter_map(|entry| {
        let (name, value) = entry.split_once('=')?;
        let locked = value.ends_with('!');
        Some(Gate { name, default: value.trim_end_matches('!') == "true", locked })
    })
}

/// The gate called `name`, if kube-proxy knows it.
pub fn gate(name: &str) -> Option<Gate> {
    known().find(|g| g.name == name)
}

/// Gates set explicitly (by `--feature-gates` or the file's `featureGates`), by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates(pub BTreeMap<String, bool>);

impl FeatureGates {
    /// Parses `--feature-gates`: `Name=bool` pairs separated by commas, spaces around each
    /// trimmed, booleans as Go's `strconv.ParseBool` takes them. Names are checked later
    /// (`check`), as upstream sets the gates after reading the flags.
    pub fn parse(text: &str) -> Result<FeatureGates, String> {
        let mut gates = BTreeMap::new();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(format!("malformed pair {pair:?}, expected Name=true or Name=false"));
            };
            let value = super::values::parse_go_bool(value.trim())
                .map_err(|_| format!("invalid value of {}={}: not a boolean", name.trim(), value.trim()))?;
            gates.insert(name.trim().to_string(), value);
        }
        Ok(FeatureGates(gates))
    }

    /// Adds `other`'s settings over these (a later `--feature-gates` wins per gate).
    pub fn merge(&mut self, other: FeatureGates) {
        self.0.extend(other.0);
    }

    /// Refuses what kube-proxy's feature gate refuses: an unknown name, or a locked gate set
    /// away from its default. A deprecated gate is accepted, as upstream (it only warns).
    pub fn check(&self) -> Result<(), String> {
        for (name, value) in &self.0 {
            match gate(name) {
                None => return Err(format!("unrecognized feature gate: {name}")),
                Some(g) if g.locked && g.default != *value => {
                    return Err(format!(
                        "cannot set feature gate {name} to {value}, feature is locked to {}",
                        g.default
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Whether gate `name` is on: its explicit setting, else (for a gate off by default)
    /// `AllAlpha`, else its default. Unknown gates are off.
    pub fn enabled(&self, name: &str) -> bool {
        let Some(g) = gate(name) else { return false };
        match self.0.get(name) {
            Some(v) => *v,
            None if !g.default && !g.locked => self.0.get("AllAlpha").copied().unwrap_or(false),
            None => g.default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_and_are_checked_as_upstream() {
        let g = FeatureGates::parse(" ComponentFlagz=true , LoggingAlphaOptions = f,").unwrap();
        assert_eq!(g.0.len(), 2);
        assert!(g.check().is_ok() && g.enabled("ComponentFlagz") && !g.enabled("LoggingAlphaOptions"));
        assert!(FeatureGates::default().enabled("WatchListClient"), "a default-on gate");
        assert!(FeatureGates::parse("NoValue").is_err());
        assert!(FeatureGates::parse("ComponentFlagz=maybe").unwrap_err().contains("ComponentFlagz"));
        let unknown = FeatureGates::parse("Frobnicate=true").unwrap().check().unwrap_err();
        assert_eq!(unknown, "unrecognized feature gate: Frobnicate");
        let locked = FeatureGates::parse("NFTablesProxyMode=false").unwrap().check().unwrap_err();
        assert!(locked.contains("locked to true"), "{locked}");
        assert!(FeatureGates::parse("NFTablesProxyMode=true").unwrap().check().is_ok());
        assert!(FeatureGates::parse("AllAlpha=true").unwrap().enabled(LOGGING_ALPHA_OPTIONS));
        assert!(known().count() > 200, "the whole list");
    }
}
