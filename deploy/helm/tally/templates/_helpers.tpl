{{/* The chart's name, or nameOverride. */}}
{{- define "tally.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Object names: fullnameOverride, else the release name (when it
already says the chart's name), else release-name. At most 50 characters:
components add suffixes such as "-worker-metrics". */}}
{{- define "tally.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "tally.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the pods run as. */}}
{{- define "tally.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tally.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Whether the cluster serves an API (group/version/kind), or the values
say to assume it (`apiVersions`: `helm template` renders offline, where
only `--api-versions` would tell). ($ = root, api) */}}
{{- define "tally.hasApi" -}}
{{- if or (.root.Capabilities.APIVersions.Has .api) (has .api .root.Values.apiVersions) -}}
true
{{- end -}}
{{- end -}}

{{/* The address the workers reach tally at: worker.server, else this
release's Service. */}}
{{- define "tally.workerServer" -}}
{{- if .Values.worker.server -}}
{{- .Values.worker.server -}}
{{- else if .Values.server.enabled -}}
{{- printf "%s://%s:50051" (ternary "https" "http" .Values.tls.enabled) (include "tally.fullname" .) -}}
{{- else -}}
{{- fail "worker.server is required when server.enabled is false (the tally address, e.g. http://tally.tally.svc:50051)" -}}
{{- end -}}
{{- end -}}

{{/* The API the workers speak and where: its name, the flag of its base
URL, the base URL, its port (the URL's, else 80 for http and 443 for
https: the workers' NetworkPolicy opens it besides 443), the variable of
its key and the Secret holding the key (root context; read it with
fromYaml). Only this API's key is asked for. */}}
{{- define "tally.workerApi" -}}
{{- $w := .Values.worker -}}
{{- $api := default $w.provider $w.providerApi -}}
{{- if not (has $api (list "gemini" "openai" "anthropic")) -}}
{{- fail (printf "worker.provider %q names no API: set worker.providerApi to the one it speaks (gemini, openai or anthropic)" $w.provider) -}}
{{- end -}}
{{- $at := get $w $api -}}
{{- $baseUrl := $at.baseUrl -}}
{{- $secretName := $at.secretName -}}
{{- $key := $at.key -}}
{{- if eq $api "gemini" -}}
{{- /* the chart's earlier names, kept: set, they win over worker.gemini's */ -}}
{{- $baseUrl = default $baseUrl $w.geminiBaseUrl -}}
{{- $secretName = default $secretName $w.geminiSecretName -}}
{{- $key = default $key $w.geminiKey -}}
{{- end -}}
{{- $url := urlParse $baseUrl -}}
{{- $port := regexFind ":[0-9]+$" $url.host | trimPrefix ":" -}}
api: {{ $api }}
baseUrlFlag: --{{ $api }}-base-url
baseUrl: {{ $baseUrl | quote }}
port: {{ default (ternary "80" "443" (eq $url.scheme "http")) $port | quote }}
keyEnv: {{ upper $api }}_API_KEY
secretName: {{ $secretName | quote }}
key: {{ $key | quote }}
{{- end -}}

{{/* Labels selecting one component's pods ($ = root, component). */}}
{{- define "tally.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tally.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tally.labels" -}}
{{ include "tally.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* An image reference with a pinned tag (never "latest"). */}}
{{- define "tally.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag | toString -}}
{{- if or (eq $tag "latest") (eq $tag "") -}}
{{- fail (printf "%s: pin an image tag (not %q)" .image.repository $tag) -}}
{{- end -}}
{{- printf "%s%s:%s" .root.Values.imageRegistry .image.repository $tag -}}
{{- end -}}

{{/* Pod Security "restricted": the pod's part, with the ServiceAccount
and the image pull secrets (root context). */}}
{{- define "tally.podSecurity" -}}
serviceAccountName: {{ include "tally.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* Pod Security "restricted": each container's part. */}}
{{- define "tally.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities: {drop: [ALL]}
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* Scheduling knobs of a component's values. */}}
{{- define "tally.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}


{{/* A pod template's metadata: labels, and the annotations of
podAnnotations and the component's own ($ = root, component, values). */}}
{{- define "tally.podMetadata" -}}
labels: {{- include "tally.labels" . | nindent 2 }}
{{- $annotations := merge (deepCopy (default (dict) .values.podAnnotations)) (default (dict) .root.Values.podAnnotations) }}
{{- with $annotations }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
