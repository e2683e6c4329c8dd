// The fleet's user-assigned managed identity, trusted for the chart's Kubernetes service account
// through the cluster's OIDC issuer (AKS workload identity).

@description('Name of the user-assigned managed identity.')
param identityName string

@description('Azure region of the identity.')
param location string

@description('The AKS cluster OIDC issuer URL (az aks show --query oidcIssuerProfile.issuerUrl).')
@minLength(1)
param oidcIssuerUrl string

@description('Namespace of the chart\'s service account.')
param kubernetesNamespace string

@description('The chart\'s service account, whose tokens the federated credential trusts.')
param serviceAccountName string

@description('Tags on the identity.')
param tags object

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: identityName
  location: location
  tags: tags
}

resource federatedCredential 'Microsoft.ManagedIdentity/userAssignedIdentities/federatedIdentityCredentials@2023-01-31' = {
  parent: identity
  name: 'aks-${kubernetesNamespace}-${serviceAccountName}'
  properties: {
    issuer: oidcIssuerUrl
    subject: 'system:serviceaccount:${kubernetesNamespace}:${serviceAccountName}'
    audiences: [
      'api://AzureADTokenExchange'
    ]
  }
}

output identityId string = identity.id
output clientId string = identity.properties.clientId
output principalId string = identity.properties.principalId
output federatedSubject string = federatedCredential.properties.subject
