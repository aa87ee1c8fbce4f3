{{/* The app name: the chart's, or nameOverride. */}}
{{- define "ringxds.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' name: fullnameOverride, else the release name when it contains
the app name, else <release>-<app>.
*/}}
{{- define "ringxds.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "ringxds.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels of the Pods, and what every selector matches: the name alone, as in
deploy/base, so that the chart and the base select the same Pods.
*/}}
{{- define "ringxds.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ringxds.name" . }}
{{- end }}

{{/*
Labels of every object: deploy/base's (the name, and part-of from its
kustomization), then Helm's.
*/}}
{{- define "ringxds.labels" -}}
{{ include "ringxds.selectorLabels" . }}
app.kubernetes.io/part-of: ringxds
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image: by digest alone when one is given. */}}
{{- define "ringxds.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The Secret holding the xDS port's certificate. */}}
{{- define "ringxds.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-xds-tls" (include "ringxds.fullname" .)) }}
{{- end }}

{{/* The ConfigMap holding the endpoints file. */}}
{{- define "ringxds.endpointsConfigMap" -}}
{{- .Values.source.file.existingConfigMap | default (printf "%s-endpoints" (include "ringxds.fullname" .)) }}
{{- end }}

{{/*
Refuses value combinations that would render objects that cannot work;
values.schema.json checks each value alone.
*/}}
{{- define "ringxds.validate" -}}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.enabled) }}
{{- fail "tls.certManager.enabled needs tls.enabled: the certificate would be issued but not used" }}
{{- end }}
{{- if and (eq .Values.source.type "file") (not .Values.source.file.existingConfigMap) (not .Values.source.file.endpoints) }}
{{- fail "source.type file needs source.file.existingConfigMap or source.file.endpoints" }}
{{- end }}
{{- if and .Values.source.file.existingConfigMap .Values.source.file.endpoints }}
{{- fail "source.file.existingConfigMap and source.file.endpoints exclude each other" }}
{{- end }}
{{- $ports := list (int .Values.xds.port) (int .Values.metrics.port) (int .Values.debug.port) }}
{{- if ne (len ($ports | uniq)) 3 }}
{{- fail "xds.port, metrics.port and debug.port must differ" }}
{{- end }}
{{- end }}
