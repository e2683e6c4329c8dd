{{/* The chart name, possibly overridden. */}}
{{- define "entrabot-fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the prefix of every object this chart creates. */}}
{{- define "entrabot-fleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "entrabot-fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "entrabot-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Metadata every object of the release carries, selected by nothing. */}}
{{- define "entrabot-fleet.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: entrabot-fleet
{{- end -}}

{{- define "entrabot-fleet.labels" -}}
{{ include "entrabot-fleet.selectorLabels" . }}
{{ include "entrabot-fleet.commonLabels" . }}
{{- end -}}

{{/* The `helm test` pod's own name label: not the replicas', so the Deployment, the Service, the
PodDisruptionBudget and the NetworkPolicy (which select app.kubernetes.io/name=<name>) leave it out,
and the NetworkPolicy admits it by these labels. */}}
{{- define "entrabot-fleet.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "entrabot-fleet.name" . | trunc 58 | trimSuffix "-" }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: helm-test
{{- end -}}

{{- define "entrabot-fleet.testLabels" -}}
{{ include "entrabot-fleet.testSelectorLabels" . }}
{{ include "entrabot-fleet.commonLabels" . }}
{{- end -}}

{{- define "entrabot-fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "entrabot-fleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "entrabot-fleet.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Secret the pods read ENTRABOT_* secrets from, or "" when there is none. */}}
{{- define "entrabot-fleet.secretName" -}}
{{- if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else if or .Values.secrets.blueprintClientSecret .Values.secrets.mcpStaticTokens .Values.secrets.blobConnectionString .Values.secrets.notificationClientState .Values.secrets.delegatedTokenKey -}}
{{- include "entrabot-fleet.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* Host names /mcp answers: the Service's in-cluster names, the configured ones, the ingress's and route's. */}}
{{- define "entrabot-fleet.allowedHosts" -}}
{{- $svc := include "entrabot-fleet.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) "localhost" "127.0.0.1" -}}
{{- $public := list -}}
{{- if and .Values.ingress.enabled .Values.ingress.host }}{{ $public = append $public .Values.ingress.host }}{{ end -}}
{{- if .Values.gatewayApi.enabled }}{{ $public = concat $public .Values.gatewayApi.hostnames }}{{ end -}}
{{- concat $hosts .Values.config.mcpAllowedHosts $public | uniq | join "," -}}
{{- end -}}

{{/* Where AKS's workload-identity webhook mounts the projected service account token. */}}
{{- define "entrabot-fleet.federatedTokenFile" -}}
/var/run/secrets/azure/tokens/azure-identity-token
{{- end -}}

{{- define "entrabot-fleet.blueprintCertificateDir" -}}
/etc/entrabot/blueprint
{{- end -}}

{{/* Refuses value combinations that would deploy a fleet that cannot work. */}}
{{- define "entrabot-fleet.validate" -}}
{{- if and (not .Values.config.blobEndpoint) (or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1)) -}}
{{- fail "config.blobEndpoint is empty: without the shared Blob ledger every replica would claim on its own and deliver messages twice. Set config.blobEndpoint (deploy/bicep output blobEndpoint), or run one replica (replicaCount=1, autoscaling.enabled=false) for a trial." -}}
{{- end -}}
{{- if lt (int .Values.service.sessionAffinityTimeoutSeconds) (int .Values.config.mcpSessionIdleTimeoutSeconds) -}}
{{- fail (printf "service.sessionAffinityTimeoutSeconds (%v) is shorter than config.mcpSessionIdleTimeoutSeconds (%v): a live MCP session would move to a replica that does not hold it. Raise the affinity timeout or lower the idle timeout." .Values.service.sessionAffinityTimeoutSeconds .Values.config.mcpSessionIdleTimeoutSeconds) -}}
{{- end -}}
{{- /* What service/from_settings/signin.py check_delegated_settings refuses at start-up. */ -}}
{{- if eq .Values.config.authMode "delegated" -}}
{{- if not (and .Values.config.tenantId .Values.config.delegatedClientId) -}}
{{- fail "config.authMode is delegated but config.tenantId or config.delegatedClientId is empty: set the tenant and the public client app registration people sign in to (docs/configuration.md, delegated mode)." -}}
{{- end -}}
{{- if not (or .Values.secrets.delegatedTokenKey .Values.secrets.existingSecret) -}}
{{- fail "config.authMode is delegated but secrets.delegatedTokenKey is empty: set it to 32 random bytes in base64 (openssl rand -base64 32), or secrets.existingSecret holding ENTRABOT_DELEGATED_TOKEN_KEY; it seals the signed-in person's tokens in the container." -}}
{{- end -}}
{{- if eq .Values.config.blobAuth "agent_user" -}}
{{- fail "config.authMode is delegated with config.blobAuth=agent_user: there is no agent user, and the signed-in person's token is itself kept in the container. Use config.blobAuth=default_credential (workload identity) or connection_string." -}}
{{- end -}}
{{- if or .Values.blueprint.clientId .Values.config.agentIdentityId .Values.config.agentUserId -}}
{{- fail "config.authMode is delegated but blueprint.clientId, config.agentIdentityId or config.agentUserId is set: those name an Entra Agent ID agent user, which delegated mode does not use. Empty them, or use config.authMode=agent_user." -}}
{{- end -}}
{{- end -}}
{{- if and (eq .Values.blueprint.credential "workloadIdentity") .Values.blueprint.clientId (not .Values.workloadIdentity.enabled) -}}
{{- fail "blueprint.credential is workloadIdentity but workloadIdentity.enabled is false: enable workload identity (and set workloadIdentity.clientId), or use blueprint.credential=secret or certificate." -}}
{{- end -}}
{{- if and (eq .Values.blueprint.credential "secret") (not .Values.secrets.blueprintClientSecret) (not .Values.secrets.existingSecret) -}}
{{- fail "blueprint.credential is secret but neither secrets.blueprintClientSecret nor secrets.existingSecret is set: set one, or use blueprint.credential=workloadIdentity." -}}
{{- end -}}
{{- if and (eq .Values.blueprint.credential "certificate") (not .Values.blueprint.certificate.secretName) -}}
{{- fail "blueprint.credential is certificate but blueprint.certificate.secretName is empty: name the Secret holding the PEM certificate and key." -}}
{{- end -}}
{{- if and .Values.workloadIdentity.enabled (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
{{- fail "workloadIdentity.enabled needs a dedicated service account: set serviceAccount.create=true, or serviceAccount.name to an account annotated with azure.workload.identity/client-id." -}}
{{- end -}}
{{- /* What service/from_settings/mcp.py check_auth_config refuses at start-up, refused here instead of as a crash loop. */ -}}
{{- if and .Values.config.mcpJwtAudience (not .Values.config.tenantId) -}}
{{- fail "config.mcpJwtAudience is set but config.tenantId is not: the service refuses to start. Set the tenant whose tokens /mcp accepts (config.tenantId), or unset config.mcpJwtAudience." -}}
{{- end -}}
{{- /* service/mcp/access_policy.py reads comma-separated names, blanks dropped: ", " names nothing. */ -}}
{{- if and .Values.config.mcpJwtAudience (not (regexReplaceAll "[\\s,]+" (printf "%s%s" .Values.config.mcpJwtRequiredRoles .Values.config.mcpJwtRequiredScopes) "")) -}}
{{- fail "config.mcpJwtAudience is set but neither config.mcpJwtRequiredRoles nor config.mcpJwtRequiredScopes is: the service refuses to start, since any app in the tenant can get a token for the audience. Set the app role (e.g. Entrabot.Host) or delegated scope a client must hold (docs/entra-app-registration.md)." -}}
{{- end -}}
{{- /* What service/config.py refuses for change notifications. */ -}}
{{- if and .Values.config.notificationUrl (not (or .Values.secrets.notificationClientState .Values.secrets.existingSecret)) -}}
{{- fail "config.notificationUrl is set but secrets.notificationClientState is not: the service refuses to start. Set secrets.notificationClientState to a random secret of at most 128 characters (or secrets.existingSecret holding ENTRABOT_NOTIFICATION_CLIENT_STATE)." -}}
{{- end -}}
{{- if hasKey .Values.config.extraEnv "ENTRABOT_NOTIFICATION_URL" -}}
{{- fail "config.extraEnv sets ENTRABOT_NOTIFICATION_URL: set config.notificationUrl instead, so the chart routes POST /graph/notifications through the Ingress and the HTTPRoute and checks the client state." -}}
{{- end -}}
{{- if not (or .Values.config.mcpJwtAudience .Values.secrets.mcpStaticTokens .Values.secrets.existingSecret) -}}
{{- fail "/mcp has no authentication and the pods listen on all interfaces: the service refuses to start. Set config.mcpJwtAudience (with config.tenantId and config.mcpJwtRequiredRoles or config.mcpJwtRequiredScopes; docs/entra-app-registration.md), or secrets.mcpStaticTokens, or secrets.existingSecret holding ENTRABOT_MCP_STATIC_TOKENS." -}}
{{- end -}}
{{- end -}}

{{/* The path Graph posts change notifications to (service/notifications/receiver.py NOTIFICATIONS_PATH). */}}
{{- define "entrabot-fleet.notificationsPath" -}}
/graph/notifications
{{- end -}}
