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

{{- define "draftgate.poolName" -}}
{{- printf "%s-%s" .root.Release.Name .pool.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
