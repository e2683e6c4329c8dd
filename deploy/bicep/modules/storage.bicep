// The storage account, its blob service and the one container the fleet keeps all shared state in,
// with the workload's identity allowed to read and write blobs in that container only.

@description('Storage account name: 3-24 lowercase letters and digits, globally unique.')
@minLength(3)
@maxLength(24)
param storageAccountName string

param location string

@description('The container holding the ledger, the interaction log and the summaries.')
@minLength(3)
@maxLength(63)
param containerName string

@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GZRS'
])
param skuName string

@description('Principal (object) id granted Storage Blob Data Contributor on the container.')
param dataContributorPrincipalId string

param tags object

// Storage Blob Data Contributor (built-in role).
var blobDataContributorRoleId = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: storageAccountName
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    accessTier: 'Hot'
    // Entra ID only: no account keys, no SAS signed with them.
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      defaultAction: 'Allow'
      bypass: 'AzureServices'
    }
  }
}

// No blob soft delete, versioning or change feed: the ledger's cursors are rewritten thousands of
// times a day, and every rewrite would otherwise keep a billed copy.
resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storageAccount
  name: 'default'
  properties: {
    deleteRetentionPolicy: {
      enabled: false
    }
    isVersioningEnabled: false
    changeFeed: {
      enabled: false
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: 7
    }
  }
}

resource container 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: containerName
  properties: {
    publicAccess: 'None'
  }
}

// Scoped to the container, not the account: the identity can touch nothing else.
resource containerDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(container.id, dataContributorPrincipalId, blobDataContributorRoleId)
  scope: container
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataContributorRoleId)
    principalId: dataContributorPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output storageAccountName string = storageAccount.name
output blobEndpoint string = storageAccount.properties.primaryEndpoints.blob
output containerName string = container.name
output containerResourceId string = container.id
