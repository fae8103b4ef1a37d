{{/* The chart's name, or nameOverride. */}}
{{- define "karpenter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the Deployment, Service and (by default) ServiceAccount: fullnameOverride, else the
release name when it holds the chart's name, else "<release>-<name>". */}}
{{- define "karpenter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "karpenter.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels the pods are selected by. */}}
{{- define "karpenter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "karpenter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "karpenter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "karpenter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpenter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The controller's image: repository with the digest if set, else the tag. */}}
{{- define "karpenter.controller.image" -}}
{{- $image := .Values.controller.image }}
{{- if not $image.repository }}
{{- fail "controller.image.repository is required: an image holding the karpenter command with karpenter-aws installed (the Dockerfile builds one)" }}
{{- end }}
{{- if hasPrefix "public.ecr.aws/karpenter/" $image.repository }}
{{- fail (printf "controller.image.repository %s is upstream Karpenter's image; this chart runs an image holding the karpenter command with karpenter-aws installed" $image.repository) }}
{{- end }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository $image.tag }}
{{- end }}
{{- end }}

{{/* Give every pod (anti-)affinity term and topology spread constraint without a
labelSelector the pod's selector labels (the lists are changed in place). */}}
{{- define "karpenter.defaultSelectors" -}}
{{- $selector := dict "matchLabels" (include "karpenter.selectorLabels" . | fromYaml) }}
{{- range $kind := list "podAffinity" "podAntiAffinity" }}
{{- with (get ($.Values.affinity | default dict) $kind) }}
{{- range $term := (.requiredDuringSchedulingIgnoredDuringExecution | default list) }}
{{- if not (hasKey $term "labelSelector") }}{{ $_ := set $term "labelSelector" $selector }}{{ end }}
{{- end }}
{{- range $weighted := (.preferredDuringSchedulingIgnoredDuringExecution | default list) }}
{{- $term := $weighted.podAffinityTerm }}
{{- if and $term (not (hasKey $term "labelSelector")) }}{{ $_ := set $term "labelSelector" $selector }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $constraint := .Values.topologySpreadConstraints }}
{{- if not (hasKey $constraint "labelSelector") }}{{ $_ := set $constraint "labelSelector" $selector }}{{ end }}
{{- end }}
{{- end }}

{{/* Settings this chart refuses in combination (single values are checked by the schema). */}}
{{- define "karpenter.validate" -}}
{{- if ne (toString .Values.settings.amiRefreshInterval) (toString .Values.settings.subnetRefreshInterval) }}
{{- fail (printf "settings.amiRefreshInterval (%v) and settings.subnetRefreshInterval (%v) differ: EC2NodeClasses resolve AMIs, subnets and security groups together, every KARPENTER_AWS_NODECLASS_RESYNC_PERIOD; set both to the same duration" .Values.settings.amiRefreshInterval .Values.settings.subnetRefreshInterval) }}
{{- end }}
{{- end }}
