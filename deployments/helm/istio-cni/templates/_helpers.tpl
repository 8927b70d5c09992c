{{/*
istio-cni.settings: the values a platform profile may set, resolved once:
a value set explicitly wins over the profile (files/profile-platform-*),
which wins over the defaults. Rendered as YAML; templates read it with
`include "istio-cni.settings" . | fromYaml`.
*/}}
{{- define "istio-cni.settings" -}}
{{- $p := dict -}}
{{- with .Values.global.platform -}}
{{- $f := $.Files.Get (printf "files/profile-platform-%s.yaml" .) -}}
{{- if not $f -}}
{{- fail (printf "global.platform %q: want gke, k3s, k3d, microk8s, minikube or openshift" .) -}}
{{- end -}}
{{- $p = fromYaml $f -}}
{{- end -}}
{{- $chained := true -}}
{{- if kindIs "bool" .Values.chained -}}
{{- $chained = .Values.chained -}}
{{- else if hasKey $p "chained" -}}
{{- $chained = $p.chained -}}
{{- end -}}
{{- $quota := true -}}
{{- if kindIs "bool" .Values.resourceQuotas.enabled -}}
{{- $quota = .Values.resourceQuotas.enabled -}}
{{- else if hasKey $p "resourceQuotas" -}}
{{- $quota = $p.resourceQuotas.enabled -}}
{{- end -}}
{{- $se := mustMergeOverwrite (deepCopy ($p.seLinuxOptions | default dict)) (deepCopy .Values.seLinuxOptions) -}}
{{- if and $se (not $se.type) -}}
{{- $_ := set $se "type" "spc_t" -}}
{{- end -}}
{{- /* env: overrides the settings below in the ConfigMap; the rights
      and capabilities follow the final value, so an override can never
      ask for what the chart did not grant. */ -}}
{{- $env := .Values.env | default dict -}}
{{- $action := "off" -}}
{{- if .Values.repair.enabled -}}
{{- $action = "report" -}}
{{- if .Values.repair.repairPods -}}
{{- $action = "repair" -}}
{{- else if .Values.repair.deletePods -}}
{{- $action = "delete" -}}
{{- else if .Values.repair.labelPods -}}
{{- $action = "label" -}}
{{- end -}}
{{- end -}}
{{- $v := include "istio-cni.envValue" (list $env "AUDIT_ACTION") -}}
{{- if $v -}}
{{- $action = $v -}}
{{- if not (has $action (list "repair" "delete" "label" "report" "off")) -}}
{{- fail (printf "env.AUDIT_ACTION %q: want repair, delete, label, report or off" $action) -}}
{{- end -}}
{{- end -}}
{{- $missed := toString .Values.missedInjection.mode -}}
{{- if not (has $missed (list "report" "restart" "off")) -}}
{{- fail (printf "missedInjection.mode %q: want report, restart or off" $missed) -}}
{{- end -}}
{{- $v = include "istio-cni.envValue" (list $env "MISSED_INJECTION") -}}
{{- if $v -}}
{{- $missed = $v -}}
{{- if not (has $missed (list "report" "restart" "off")) -}}
{{- fail (printf "env.MISSED_INJECTION %q: want report, restart or off" $missed) -}}
{{- end -}}
{{- end -}}
{{- $labelKey := toString (coalesce $env.AUDIT_LABEL_KEY .Values.repair.brokenPodLabelKey) -}}
{{- if not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" $labelKey) -}}
{{- fail (printf "repair.brokenPodLabelKey (or env.AUDIT_LABEL_KEY) %q: want a label key, [prefix/]name" $labelKey) -}}
{{- end -}}
{{- $rate := int .Values.missedInjection.restartsPerMinute -}}
{{- if or (lt $rate 1) (gt $rate 60) -}}
{{- fail (printf "missedInjection.restartsPerMinute %v: want a whole number from 1 to 60" .Values.missedInjection.restartsPerMinute) -}}
{{- end -}}
{{- $podWrites := or (has $action (list "delete" "label")) (eq $missed "restart") -}}
{{- $name := coalesce .Values.cniConfFileName $p.cniConfFileName (ternary "02-istio-cni.conflist" "istio-cni.conf" $chained) -}}
{{- if and $chained (not (hasSuffix ".conflist" $name)) -}}
{{- fail (printf "cniConfFileName %q: chained, istio-cni writes a plugin list: want a name ending in .conflist" $name) -}}
{{- else if and (not $chained) (not (hasSuffix ".conf" $name)) -}}
{{- fail (printf "cniConfFileName %q: standalone (chained: false), istio-cni writes one plugin config: want a name ending in .conf" $name) -}}
{{- end -}}
{{- $image := .Values.image -}}
{{- if not (contains "/" $image) -}}
{{- $image = printf "%s/%s:%s" (coalesce .Values.hub .Values.global.hub) .Values.image (toString (coalesce .Values.tag .Values.global.tag)) -}}
{{- end -}}
cniBinDir: {{ coalesce .Values.cniBinDir $p.cniBinDir "/opt/cni/bin" | quote }}
cniConfDir: {{ coalesce .Values.cniConfDir $p.cniConfDir "/etc/cni/net.d" | quote }}
cniNetnsDir: {{ coalesce .Values.cniNetnsDir $p.cniNetnsDir "/var/run/netns" | quote }}
chained: {{ $chained }}
cniConfFileName: {{ $name | quote }}
provider: {{ coalesce .Values.provider $p.provider "default" | quote }}
resourceQuotas: {{ $quota }}
seLinuxOptions: {{ toJson $se }}
auditAction: {{ $action | quote }}
auditLabelKey: {{ $labelKey | quote }}
missedInjection: {{ $missed | quote }}
missedRestartsPerMinute: {{ $rate }}
podWrites: {{ $podWrites }}
image: {{ $image | quote }}
openshift: {{ eq .Values.global.platform "openshift" }}
{{- end -}}

{{/*
istio-cni.envValue: env's value for a key as the agent reads it, "" when
unset or empty (the chart's own value stands). YAML 1.1 reads an unquoted
off (or no) as false: that is "off", never "false", which no setting takes.
*/}}
{{- define "istio-cni.envValue" -}}
{{- $env := index . 0 -}}{{- $k := index . 1 -}}
{{- if hasKey $env $k -}}
{{- $v := get $env $k -}}
{{- if and (kindIs "bool" $v) (not $v) -}}off
{{- else if not (kindIs "invalid" $v) -}}{{ toString $v }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "istio-cni.labels" -}}
app.kubernetes.io/name: istio-cni
app.kubernetes.io/part-of: istio-cni
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
