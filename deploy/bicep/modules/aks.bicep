// An AKS cluster ready for the chart: OIDC issuer and workload identity on, Cilium enforcing
// NetworkPolicy, nodes spread over zones, local accounts off (Entra ID and Azure RBAC only),
// automatic upgrades, and optionally Container Insights, managed Prometheus and diagnostic settings.

@description('Cluster name (also its DNS prefix).')
param clusterName string

@description('Azure region of the cluster.')
param location string

@description('Tags on the cluster.')
param tags object

@description('Kubernetes version; empty takes the region default.')
param kubernetesVersion string

@description('Automatic Kubernetes upgrade channel.')
@allowed([
  'patch'
  'stable'
  'rapid'
  'node-image'
  'none'
])
param upgradeChannel string

@description('Automatic node OS upgrade channel.')
@allowed([
  'NodeImage'
  'SecurityPatch'
  'Unmanaged'
  'None'
])
param nodeOsUpgradeChannel string

@description('Nodes of the system pool.')
@minValue(1)
param nodeCount int

@description('VM size of the nodes.')
param nodeVmSize string

@description('Availability zones for the nodes; empty where the region has none.')
param availabilityZones array

@description('Log Analytics workspace for Container Insights; empty turns it off.')
param logAnalyticsWorkspaceId string

@description('Prometheus data collection rule to associate with the cluster; empty turns managed Prometheus off.')
param dataCollectionRuleId string

@description('Log Analytics workspace for the control plane\'s diagnostic settings (audit logs); empty sends none.')
param diagnosticsWorkspaceId string

var monitoringEnabled = !empty(logAnalyticsWorkspaceId)
var prometheusEnabled = !empty(dataCollectionRuleId)

resource cluster 'Microsoft.ContainerService/managedClusters@2024-09-01' = {
  name: clusterName
  location: location
  tags: tags
  identity: {
    type: 'SystemAssigned'
  }
  sku: {
    name: 'Base'
    tier: 'Standard'
  }
  properties: {
    dnsPrefix: clusterName
    kubernetesVersion: empty(kubernetesVersion) ? null : kubernetesVersion
    enableRBAC: true
    // No static admin kubeconfig: every kubectl user signs in with Entra ID (az aks get-credentials).
    disableLocalAccounts: true
    autoUpgradeProfile: {
      upgradeChannel: upgradeChannel
      nodeOSUpgradeChannel: nodeOsUpgradeChannel
    }
    aadProfile: {
      managed: true
      enableAzureRBAC: true
    }
    oidcIssuerProfile: {
      enabled: true
    }
    securityProfile: {
      workloadIdentity: {
        enabled: true
      }
    }
    agentPoolProfiles: [
      {
        name: 'system'
        mode: 'System'
        type: 'VirtualMachineScaleSets'
        osType: 'Linux'
        osSKU: 'AzureLinux'
        count: nodeCount
        vmSize: nodeVmSize
        availabilityZones: availabilityZones
      }
    ]
    networkProfile: {
      networkPlugin: 'azure'
      networkPluginMode: 'overlay'
      networkDataplane: 'cilium'
      networkPolicy: 'cilium'
    }
    azureMonitorProfile: {
      metrics: {
        enabled: prometheusEnabled
      }
    }
    addonProfiles: monitoringEnabled ? {
      omsagent: {
        enabled: true
        config: {
          logAnalyticsWorkspaceResourceID: logAnalyticsWorkspaceId
          useAADAuth: 'true'
        }
      }
    } : {}
  }
}

resource prometheusRuleAssociation 'Microsoft.Insights/dataCollectionRuleAssociations@2023-03-11' = if (prometheusEnabled) {
  name: '${clusterName}-prometheus'
  scope: cluster
  properties: {
    dataCollectionRuleId: dataCollectionRuleId
    description: 'Sends the Prometheus metrics of the cluster to the Azure Monitor workspace.'
  }
}

resource clusterDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (!empty(diagnosticsWorkspaceId)) {
  name: 'to-log-analytics'
  scope: cluster
  properties: {
    workspaceId: diagnosticsWorkspaceId
    logs: [
      {
        category: 'kube-audit-admin'
        enabled: true
      }
      {
        category: 'guard'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

output clusterId string = cluster.id
output kubeletPrincipalId string = cluster.properties.identityProfile.kubeletidentity.objectId
output oidcIssuerUrl string = cluster.properties.oidcIssuerProfile.issuerURL
