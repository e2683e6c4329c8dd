// Log Analytics for container logs, and Azure Monitor managed Prometheus: an Azure Monitor
// workspace plus the data collection endpoint and rule the cluster's metrics add-on sends through.

@description('Prefix of the workspace, account and collection rule names.')
param namePrefix string

@description('Azure region of the monitoring resources.')
param location string

@description('Tags on every resource.')
param tags object

@description('Days Log Analytics keeps logs.')
@minValue(30)
@maxValue(730)
param logRetentionDays int

resource logAnalytics 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: '${namePrefix}-logs'
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: logRetentionDays
  }
}

resource monitorWorkspace 'Microsoft.Monitor/accounts@2023-04-03' = {
  name: '${namePrefix}-prometheus'
  location: location
  tags: tags
}

resource collectionEndpoint 'Microsoft.Insights/dataCollectionEndpoints@2023-03-11' = {
  name: '${namePrefix}-prometheus-dce'
  location: location
  tags: tags
  kind: 'Linux'
  properties: {}
}

resource collectionRule 'Microsoft.Insights/dataCollectionRules@2023-03-11' = {
  name: '${namePrefix}-prometheus-dcr'
  location: location
  tags: tags
  kind: 'Linux'
  properties: {
    dataCollectionEndpointId: collectionEndpoint.id
    dataSources: {
      prometheusForwarder: [
        {
          name: 'PrometheusDataSource'
          streams: [
            'Microsoft-PrometheusMetrics'
          ]
          labelIncludeFilter: {}
        }
      ]
    }
    destinations: {
      monitoringAccounts: [
        {
          accountResourceId: monitorWorkspace.id
          name: 'MonitoringAccount'
        }
      ]
    }
    dataFlows: [
      {
        streams: [
          'Microsoft-PrometheusMetrics'
        ]
        destinations: [
          'MonitoringAccount'
        ]
      }
    ]
  }
}

output logAnalyticsWorkspaceId string = logAnalytics.id
output monitorWorkspaceId string = monitorWorkspace.id
output dataCollectionRuleId string = collectionRule.id
