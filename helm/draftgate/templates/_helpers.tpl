{{- define "draftgate.fullname" -}}
{{- printf "%s-draftgate" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "draftgate.labels" -}}
app.kubernetes.io/name: draftgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "draftgate.selector" -}}
app.kubernetes.io/name: draftgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: proxy
{{- end -}}

{{- /* the proxy's port name says its protocol, as meshes read it (Istio: "http" is plaintext) */ -}}
{{- define "draftgate.portName" -}}
{{- if .Values.tls.serverSecret }}https{{ else }}http{{ end -}}
{{- end -}}

{{- define "draftgate.poolName" -}}
{{- printf "%s-%s" .root.Release.Name .pool.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
