// Azure resources for Entrabot Fleet, in one resource group:
//   - the storage account and the one Blob container holding the fleet's shared state (optionally
//     reachable only through a private endpoint), with diagnostic settings when a workspace is known;
//   - a user-assigned managed identity for the pods (AKS workload identity), trusted for the Helm
//     chart's service account and allowed Storage Blob Data Contributor on that container only;
//   - optionally an AKS cluster (OIDC issuer + workload identity, local accounts off, automatic
//     upgrades), Log Analytics and Azure Monitor managed Prometheus, and a container registry the
//     cluster's kubelet may pull from (AcrPull).
//
// The agent identity blueprint, agent identity, agent user, sponsors, Graph permissions and the
// blueprint's federated credential are Entra objects, not Azure resources: docs/azure.md creates them.
//
//   az deployment group create -g <rg> -f deploy/bicep/main.bicep \
//     -p aksOidcIssuerUrl=$(az aks show -g <rg> -n <aks> --query oidcIssuerProfile.issuerUrl -o tsv)
//
// The outputs are the chart's values: config.blobEndpoint, config.blobContainer and
// workloadIdentity.clientId (see output helmValues).
targetScope = 'resourceGroup'

@description('Prefix of every resource name: 3-11 lowercase letters and digits.')
@minLength(3)
@maxLength(11)
param namePrefix string = 'entrabot'

@description('Azure region of every resource; the resource group\'s by default.')
param location string = resourceGroup().location

@description('Storage account name; the default is unique per resource group.')
@minLength(3)
@maxLength(24)
param storageAccountName string = '${namePrefix}${uniqueString(resourceGroup().id)}'

@description('Storage redundancy: zone-redundant by default, so a zone outage loses no ledger write.')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GZRS'
])
param storageSku string = 'Standard_ZRS'

@description('The Blob container of the fleet (the chart value config.blobContainer).')
param containerName string = 'entrabot'

@description('Subnet for a private endpoint to the storage account\'s blob service; empty keeps public network access. When set, public access is turned off, so the pods must reach this subnet (same or peered virtual network).')
param storagePrivateEndpointSubnetId string = ''

@description('Namespace the Helm release is installed in.')
param kubernetesNamespace string = 'entrabot'

@description('The chart service account: the release full name unless serviceAccount.name is set.')
param serviceAccountName string = 'entrabot-fleet'

@description('OIDC issuer of an existing AKS cluster; ignored when deployAks is true.')
param aksOidcIssuerUrl string = ''

@description('Create an AKS cluster for the fleet.')
param deployAks bool = false

@description('Create Log Analytics and Azure Monitor managed Prometheus (with deployAks).')
param deployMonitoring bool = false

@description('An existing Log Analytics workspace for diagnostic settings when deployMonitoring is false; empty sends none.')
param diagnosticsWorkspaceId string = ''

@description('Kubernetes version of a new cluster; empty takes the region default.')
param kubernetesVersion string = ''

@description('Automatic Kubernetes upgrades of a new cluster: patch takes each minor version\'s patches.')
@allowed([
  'patch'
  'stable'
  'rapid'
  'node-image'
  'none'
])
param aksUpgradeChannel string = 'patch'

@description('Automatic node OS upgrades of a new cluster.')
@allowed([
  'NodeImage'
  'SecurityPatch'
  'Unmanaged'
  'None'
])
param aksNodeOsUpgradeChannel string = 'NodeImage'

@description('Nodes of a new cluster\'s system pool.')
@minValue(1)
param nodeCount int = 3

@description('VM size of a new cluster\'s nodes.')
param nodeVmSize string = 'Standard_D4ds_v5'

@description('Availability zones for a new cluster\'s nodes; empty where the region has none.')
param availabilityZones array = [
  '1'
  '2'
  '3'
]

@description('Days Log Analytics keeps logs (with deployMonitoring).')
@minValue(30)
@maxValue(730)
param logRetentionDays int = 30

@description('Create a container registry for the fleet\'s image, with AcrPull for the cluster\'s kubelet identity.')
param deployRegistry bool = false

@description('Container registry SKU (with deployRegistry).')
@allowed([
  'Basic'
  'Standard'
  'Premium'
])
param registrySku string = 'Standard'

@description('Object id of an existing cluster\'s kubelet identity, granted AcrPull when deployAks is false (az aks show --query identityProfile.kubeletidentity.objectId).')
param kubeletPrincipalId string = ''

@description('Tags on every resource.')
param tags object = {
  application: 'entrabot-fleet'
}

var monitoringEnabled = deployAks && deployMonitoring

module monitoring 'modules/monitoring.bicep' = if (monitoringEnabled) {
  name: '${namePrefix}-monitoring'
  params: {
    namePrefix: namePrefix
    location: location
    tags: tags
    logRetentionDays: logRetentionDays
  }
}

var diagnosticsWorkspace = monitoringEnabled ? monitoring.outputs.logAnalyticsWorkspaceId : diagnosticsWorkspaceId

module aks 'modules/aks.bicep' = if (deployAks) {
  name: '${namePrefix}-aks'
  params: {
    clusterName: '${namePrefix}-aks'
    location: location
    tags: tags
    kubernetesVersion: kubernetesVersion
    upgradeChannel: aksUpgradeChannel
    nodeOsUpgradeChannel: aksNodeOsUpgradeChannel
    nodeCount: nodeCount
    nodeVmSize: nodeVmSize
    availabilityZones: availabilityZones
    logAnalyticsWorkspaceId: monitoringEnabled ? monitoring.outputs.logAnalyticsWorkspaceId : ''
    dataCollectionRuleId: monitoringEnabled ? monitoring.outputs.dataCollectionRuleId : ''
    diagnosticsWorkspaceId: diagnosticsWorkspace
  }
}

var oidcIssuerUrl = deployAks ? aks.outputs.oidcIssuerUrl : aksOidcIssuerUrl

module identity 'modules/identity.bicep' = {
  name: '${namePrefix}-identity'
  params: {
    identityName: '${namePrefix}-fleet'
    location: location
    oidcIssuerUrl: oidcIssuerUrl
    kubernetesNamespace: kubernetesNamespace
    serviceAccountName: serviceAccountName
    tags: tags
  }
}

module storage 'modules/storage.bicep' = {
  name: '${namePrefix}-storage'
  params: {
    storageAccountName: storageAccountName
    location: location
    containerName: containerName
    skuName: storageSku
    dataContributorPrincipalId: identity.outputs.principalId
    privateEndpointSubnetId: storagePrivateEndpointSubnetId
    diagnosticsWorkspaceId: diagnosticsWorkspace
    tags: tags
  }
}

module registry 'modules/registry.bicep' = if (deployRegistry) {
  name: '${namePrefix}-registry'
  params: {
    registryName: '${namePrefix}cr${uniqueString(resourceGroup().id)}'
    location: location
    skuName: registrySku
    pullPrincipalId: deployAks ? aks.outputs.kubeletPrincipalId : kubeletPrincipalId
    diagnosticsWorkspaceId: diagnosticsWorkspace
    tags: tags
  }
}

output blobEndpoint string = storage.outputs.blobEndpoint
output containerName string = storage.outputs.containerName
output identityClientId string = identity.outputs.clientId
output tenantId string = tenant().tenantId
output federatedSubject string = identity.outputs.federatedSubject
output oidcIssuerUrl string = oidcIssuerUrl
output registryLoginServer string = deployRegistry ? registry.outputs.loginServer : ''
output helmValues object = {
  config: {
    blobEndpoint: storage.outputs.blobEndpoint
    blobContainer: storage.outputs.containerName
    tenantId: tenant().tenantId
  }
  workloadIdentity: {
    enabled: true
    clientId: identity.outputs.clientId
  }
  serviceAccount: {
    name: serviceAccountName
  }
}
