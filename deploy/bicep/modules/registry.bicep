// A container registry for the fleet's image, pulled by the cluster's kubelet identity (AcrPull)
// with Entra ID: no admin user, no anonymous pull.

@description('Registry name: 5-50 letters and digits, globally unique.')
@minLength(5)
@maxLength(50)
param registryName string

@description('Azure region of the registry.')
param location string

@description('Registry SKU.')
@allowed([
  'Basic'
  'Standard'
  'Premium'
])
param skuName string

@description('Object id granted AcrPull on the registry (the kubelet identity); empty grants nothing.')
param pullPrincipalId string

@description('Log Analytics workspace for the registry\'s diagnostic settings; empty sends none.')
param diagnosticsWorkspaceId string

@description('Tags on the registry.')
param tags object

// AcrPull (built-in role).
var acrPullRoleId = '7f951dda-4ed3-4680-a7ca-43fe172d538d'

resource registry 'Microsoft.ContainerRegistry/registries@2023-07-01' = {
  name: registryName
  location: location
  tags: tags
  sku: {
    name: skuName
  }
  properties: {
    adminUserEnabled: false
    anonymousPullEnabled: false
  }
}

resource kubeletPull 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(pullPrincipalId)) {
  name: guid(registry.id, pullPrincipalId, acrPullRoleId)
  scope: registry
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', acrPullRoleId)
    principalId: pullPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource registryDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (!empty(diagnosticsWorkspaceId)) {
  name: 'to-log-analytics'
  scope: registry
  properties: {
    workspaceId: diagnosticsWorkspaceId
    logs: [
      {
        category: 'ContainerRegistryLoginEvents'
        enabled: true
      }
      {
        category: 'ContainerRegistryRepositoryEvents'
        enabled: true
      }
    ]
  }
}

output registryId string = registry.id
output loginServer string = registry.properties.loginServer
