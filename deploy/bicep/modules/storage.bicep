// The storage account, its blob service and the one container the fleet keeps all shared state in,
// with the workload's identity allowed to read and write blobs in that container only; optionally a
// private endpoint (public access then off) and diagnostic settings for the blob service.

@description('Storage account name: 3-24 lowercase letters and digits, globally unique.')
@minLength(3)
@maxLength(24)
param storageAccountName string

@description('Azure region of the account.')
param location string

@description('The container holding the ledger, the interaction log and the summaries.')
@minLength(3)
@maxLength(63)
param containerName string

@description('Storage redundancy.')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GZRS'
])
param skuName string

@description('Principal (object) id granted Storage Blob Data Contributor on the container.')
param dataContributorPrincipalId string

@description('Subnet for a private endpoint to the blob service; empty keeps public network access.')
param privateEndpointSubnetId string = ''

@description('Log Analytics workspace for the blob service\'s diagnostic settings; empty sends none.')
param diagnosticsWorkspaceId string = ''

@description('Tags on every resource.')
param tags object

var privateNetwork = !empty(privateEndpointSubnetId)
// The virtual network of the subnet (/subscriptions/…/virtualNetworks/<name>), for the DNS zone link.
var privateEndpointVnetId = join(take(split(privateEndpointSubnetId, '/'), 9), '/')

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
    publicNetworkAccess: privateNetwork ? 'Disabled' : 'Enabled'
    networkAcls: {
      defaultAction: privateNetwork ? 'Deny' : 'Allow'
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

// Change hints are one append blob a minute under hints/ (service/ledger/hints.py), never read once
// their minute and the next are past: 1,440 a day, kept forever without this rule. Lifecycle runs
// about once a day, so a segment goes one to two days after its last append. Azurite has no
// lifecycle management: local and demo runs keep their segments (their stores are throwaway).
// Rule shape read, not run (learn.microsoft.com, lifecycle-management-policy-structure: prefixMatch
// starts with the container name; append blobs take the delete action only).
resource lifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2023-05-01' = {
  parent: storageAccount
  name: 'default'
  properties: {
    policy: {
      rules: [
        {
          name: 'delete-old-hint-segments'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'appendBlob'
              ]
              prefixMatch: [
                '${containerName}/hints/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: 1
                }
              }
            }
          }
        }
      ]
    }
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

resource privateEndpoint 'Microsoft.Network/privateEndpoints@2023-11-01' = if (privateNetwork) {
  name: '${storageAccountName}-blob'
  location: location
  tags: tags
  properties: {
    subnet: {
      id: privateEndpointSubnetId
    }
    privateLinkServiceConnections: [
      {
        name: 'blob'
        properties: {
          privateLinkServiceId: storageAccount.id
          groupIds: [
            'blob'
          ]
        }
      }
    ]
  }
}

// The account's blob host name resolves to the private endpoint inside the linked network.
resource privateDnsZone 'Microsoft.Network/privateDnsZones@2020-06-01' = if (privateNetwork) {
  name: 'privatelink.blob.${environment().suffixes.storage}'
  location: 'global'
  tags: tags
}

resource privateDnsLink 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2020-06-01' = if (privateNetwork) {
  parent: privateDnsZone
  name: '${storageAccountName}-link'
  location: 'global'
  tags: tags
  properties: {
    registrationEnabled: false
    virtualNetwork: {
      id: privateEndpointVnetId
    }
  }
}

resource privateDnsZoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2023-11-01' = if (privateNetwork) {
  parent: privateEndpoint
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [
      {
        name: 'blob'
        properties: {
          privateDnsZoneId: privateDnsZone.id
        }
      }
    ]
  }
}

resource blobDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (!empty(diagnosticsWorkspaceId)) {
  name: 'to-log-analytics'
  scope: blobService
  properties: {
    workspaceId: diagnosticsWorkspaceId
    logs: [
      {
        category: 'StorageRead'
        enabled: true
      }
      {
        category: 'StorageWrite'
        enabled: true
      }
      {
        category: 'StorageDelete'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'Transaction'
        enabled: true
      }
    ]
  }
}

output storageAccountName string = storageAccount.name
output blobEndpoint string = storageAccount.properties.primaryEndpoints.blob
output containerName string = container.name
output containerResourceId string = container.id
