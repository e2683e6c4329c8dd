// Azure resources for Entrabot Fleet, in one resource group:
//   - the storage account and the one Blob container holding the fleet's shared state;
//   - a user-assigned managed identity for the pods (AKS workload identity), trusted for the Helm
//     chart's service account and allowed Storage Blob Data Contributor on that container only;
//   - optionally an AKS cluster (OIDC issuer + workload identity), Log Analytics and Azure Monitor
//     managed Prometheus.
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

param location string = resourceGroup().location

@description('Storage account name; the default is unique per resource group.')
@minLength(3)
@maxLength(24)
param storageAccountName string = '${namePrefix}${uniqueString(resourceGroup().id)}'

@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GZRS'
])
param storageSku string = 'Standard_ZRS'

@description('The Blob container of the fleet (the chart value config.blobContainer).')
param containerName string = 'entrabot'

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

param kubernetesVersion string = ''

@minValue(1)
param nodeCount int = 3

param nodeVmSize string = 'Standard_D4ds_v5'

param availabilityZones array = [
  '1'
  '2'
  '3'
]

@minValue(30)
@maxValue(730)
param logRetentionDays int = 30

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

module aks 'modules/aks.bicep' = if (deployAks) {
  name: '${namePrefix}-aks'
  params: {
    clusterName: '${namePrefix}-aks'
    location: location
    tags: tags
    kubernetesVersion: kubernetesVersion
    nodeCount: nodeCount
    nodeVmSize: nodeVmSize
    availabilityZones: availabilityZones
    logAnalyticsWorkspaceId: monitoringEnabled ? monitoring.outputs.logAnalyticsWorkspaceId : ''
    dataCollectionRuleId: monitoringEnabled ? monitoring.outputs.dataCollectionRuleId : ''
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
    tags: tags
  }
}

output blobEndpoint string = storage.outputs.blobEndpoint
output containerName string = storage.outputs.containerName
output identityClientId string = identity.outputs.clientId
output tenantId string = tenant().tenantId
output federatedSubject string = identity.outputs.federatedSubject
output oidcIssuerUrl string = oidcIssuerUrl
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
