{{/*
The namespace of every namespaced object: namespaceOverride, else
sandbox-snapshot-system (as config/ has it).
*/}}
{{- define "sso.namespace" -}}
{{- default "sandbox-snapshot-system" .Values.namespaceOverride }}
{{- end }}

{{/*
The labels Helm charts carry, when helmLabels is true. release.yaml and
config/ have none of them.
*/}}
{{- define "sso.helmLabels" -}}
{{- if .Values.helmLabels }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels of what belongs to the operator as a whole: the namespace, the
PriorityClass, the CRD.
*/}}
{{- define "sso.operatorLabels" -}}
app.kubernetes.io/name: sandbox-snapshot-operator
app.kubernetes.io/part-of: sandbox-snapshot-operator
{{- include "sso.helmLabels" . }}
{{- end }}

{{/*
The controller's selector labels: its Deployment and Service select on them.
*/}}
{{- define "sso.selectorLabels" -}}
app.kubernetes.io/name: sandbox-snapshot-controller
app.kubernetes.io/component: controller
{{- end }}

{{/*
Labels of the controller's objects: RBAC, ConfigMaps, Deployment, Service.
*/}}
{{- define "sso.controllerLabels" -}}
{{ include "sso.selectorLabels" . }}
app.kubernetes.io/part-of: sandbox-snapshot-operator
{{- include "sso.helmLabels" . }}
{{- end }}

{{/*
Labels of the pre-delete hook's objects (templates/teardown.yaml).
*/}}
{{- define "sso.teardownLabels" -}}
app.kubernetes.io/name: sandbox-snapshot-teardown
app.kubernetes.io/component: teardown
app.kubernetes.io/part-of: sandbox-snapshot-operator
{{- include "sso.helmLabels" . }}
{{- end }}

{{/*
The annotations of a pre-delete hook object, given its weight: the
ServiceAccount and RBAC (-10) before the Job (0); each deleted before the
next uninstall's and once the hook succeeds.
*/}}
{{- define "sso.teardownHook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/*
The controller's image: repository:tag@digest, repository@digest or
repository:tag, whichever image.digest and image.tag give.
*/}}
{{- define "sso.image" -}}
{{- $img := .Values.image }}
{{- if not $img.repository }}
{{- fail "image.repository is required: the controller image, e.g. registry.example.com/sandbox-snapshot-operator/controller" }}
{{- end }}
{{- if $img.digest }}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $img.digest) }}
{{- fail (printf "image.digest %q is not sha256:<64 hex digits>" $img.digest) }}
{{- end }}
{{- if $img.tag }}
{{- printf "%s:%s@%s" $img.repository $img.tag $img.digest }}
{{- else }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- end }}
{{- else if $img.tag }}
{{- printf "%s:%s" $img.repository $img.tag }}
{{- else }}
{{- fail "set image.digest (sha256:...) or image.tag" }}
{{- end }}
{{- end }}

{{/*
The controller's ServiceAccount name. It is fixed: config/ and docs/rbac.md name it.
*/}}
{{- define "sso.serviceAccountName" -}}
sandbox-snapshot-controller
{{- end }}
