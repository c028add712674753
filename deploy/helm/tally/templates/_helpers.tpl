{{/* Names: the release name, unless it already says "tally". */}}
{{- define "tally.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels selecting one component's pods ($ = root, component). */}}
{{- define "tally.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
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

{{/* Pod Security "restricted": the pod's part. */}}
{{- define "tally.podSecurity" -}}
automountServiceAccountToken: false
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
