// An AKS cluster ready for the chart: OIDC issuer and workload identity on, Cilium enforcing
// NetworkPolicy, nodes spread over zones, and optionally Container Insights and managed Prometheus.

param clusterName string
param location string
param tags object

@description('Kubernetes version; empty takes the region default.')
param kubernetesVersion string

@minValue(1)
param nodeCount int
param nodeVmSize string

@description('Availability zones for the nodes; empty where the region has none.')
param availabilityZones array

@description('Log Analytics workspace for Container Insights; empty turns it off.')
param logAnalyticsWorkspaceId string

@description('Prometheus data collection rule to associate with the cluster; empty turns managed Prometheus off.')
param dataCollectionRuleId string

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

output clusterId string = cluster.id
output oidcIssuerUrl string = cluster.properties.oidcIssuerProfile.issuerURL
