{{/*
istio-cni.values resolves .Values once, in place, as upstream's chart
layers them (each layer wins over the ones before it):
  1. the defaults: values.yaml's _internal_defaults_do_not_set, into which
     Helm merged any upstream values file the user passed;
  2. the profile (profile or global.profile), then compatibilityVersion's
     (files/profile-*.yaml, upstream's names);
  3. the platform's (platform or global.platform;
     files/profile-platform-*.yaml);
  4. what the user set at the top level;
  5. what the user set under cni: (upstream's legacy prefix).
Unlike upstream, a profile's cni: values do not win over the user's. Every
template includes istio-cni.settings, which includes this first.
*/}}
{{- define "istio-cni.values" -}}
{{- if not (hasKey .Values "_resolved") -}}
{{- if .Values.defaults -}}
{{- fail "defaults: set values at the top level (--set hub=...), not under defaults." -}}
{{- end -}}
{{- $user := omit .Values "_internal_defaults_do_not_set" "cni" -}}
{{- $cni := deepCopy (.Values.cni | default dict) -}}
{{- $v := deepCopy (index .Values "_internal_defaults_do_not_set") -}}
{{- $seen := mustMergeOverwrite (deepCopy $v) (deepCopy $user) (deepCopy $cni) -}}
{{- $layers := list -}}
{{- with coalesce $seen.profile ($seen.global | default dict).profile -}}
{{- $f := $.Files.Get (printf "files/profile-%s.yaml" .) -}}
{{- if not $f -}}
{{- fail (printf "profile %q: want one of %s (upstream's profiles)" . (include "istio-cni.profileNames" $)) -}}
{{- end -}}
{{- $layers = append $layers (fromYaml $f) -}}
{{- end -}}
{{- with $seen.compatibilityVersion -}}
{{- $f := $.Files.Get (printf "files/profile-compatibility-version-%v.yaml" .) -}}
{{- if not $f -}}
{{- fail (printf "compatibilityVersion %q: want one of %s" (toString .) (include "istio-cni.compatibilityVersions" $)) -}}
{{- end -}}
{{- $layers = append $layers (fromYaml $f) -}}
{{- end -}}
{{- with coalesce $seen.platform ($seen.global | default dict).platform -}}
{{- $f := $.Files.Get (printf "files/profile-platform-%s.yaml" .) -}}
{{- if not $f -}}
{{- fail (printf "global.platform %q: want gke, k3s, k3d, microk8s, minikube or openshift" .) -}}
{{- end -}}
{{- $layers = append $layers (fromYaml $f) -}}
{{- end -}}
{{- range $layers -}}
{{- $v = mustMergeOverwrite $v (omit . "cni") (deepCopy (.cni | default dict)) -}}
{{- end -}}
{{- $v = mustMergeOverwrite $v (deepCopy $user) $cni -}}
{{- if ($v.ambient | default dict).enabled -}}
{{- fail "ambient.enabled true: istio-cni puts pods into a sidecar mesh only (want false; ambient mode needs upstream's istio-cni and ztunnel)" -}}
{{- end -}}
{{- range $k, $_ := $.Values -}}{{- $_ := unset $.Values $k -}}{{- end -}}
{{- range $k, $x := $v -}}{{- $_ := set $.Values $k $x -}}{{- end -}}
{{- $_ := set .Values "_resolved" true -}}
{{- end -}}
{{- end -}}

{{/* The profile names files/ holds, for errors. */}}
{{- define "istio-cni.profileNames" -}}
{{- $names := list -}}
{{- range $path, $_ := .Files.Glob "files/profile-*.yaml" -}}
{{- $n := trimSuffix ".yaml" (trimPrefix "files/profile-" $path) -}}
{{- if not (or (hasPrefix "platform-" $n) (hasPrefix "compatibility-version-" $n)) -}}
{{- $names = append $names $n -}}
{{- end -}}
{{- end -}}
{{- join ", " $names -}}
{{- end -}}

{{- define "istio-cni.compatibilityVersions" -}}
{{- $names := list -}}
{{- range $path, $_ := .Files.Glob "files/profile-compatibility-version-*.yaml" -}}
{{- $names = append $names (trimSuffix ".yaml" (trimPrefix "files/profile-compatibility-version-" $path)) -}}
{{- end -}}
{{- join ", " $names -}}
{{- end -}}

{{/*
istio-cni.settings: the settings templates derive from the resolved
values, checked once. Rendered as YAML; templates read it with
`include "istio-cni.settings" . | fromYaml`.
*/}}
{{- define "istio-cni.settings" -}}
{{- include "istio-cni.values" . -}}
{{- $platform := coalesce .Values.platform .Values.global.platform -}}
{{- $chained := true -}}
{{- if kindIs "bool" .Values.chained -}}
{{- $chained = .Values.chained -}}
{{- end -}}
{{- $quota := true -}}
{{- if kindIs "bool" .Values.resourceQuotas.enabled -}}
{{- $quota = .Values.resourceQuotas.enabled -}}
{{- end -}}
{{- $se := deepCopy (.Values.seLinuxOptions | default dict) -}}
{{- if and $se (not $se.type) -}}
{{- $_ := set $se "type" "spc_t" -}}
{{- end -}}
{{- /* env: overrides the settings below in the ConfigMap; the rights
      and capabilities follow the final value, so an override can never
      ask for what the chart did not grant. */ -}}
{{- $env := .Values.env | default dict -}}
{{- include "istio-cni.checkEnv" $env -}}
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
{{- $action = $v -}}{{- /* checked by istio-cni.checkEnv */ -}}
{{- end -}}
{{- $missed := toString .Values.missedInjection.mode -}}
{{- if not (has $missed (list "report" "restart" "off")) -}}
{{- fail (printf "missedInjection.mode %q: want report, restart or off" $missed) -}}
{{- end -}}
{{- $v = include "istio-cni.envValue" (list $env "MISSED_INJECTION") -}}
{{- if $v -}}
{{- $missed = $v -}}{{- /* checked by istio-cni.checkEnv */ -}}
{{- end -}}
{{- $labelKey := toString (coalesce $env.AUDIT_LABEL_KEY .Values.repair.brokenPodLabelKey) -}}
{{- if not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" $labelKey) -}}
{{- fail (printf "repair.brokenPodLabelKey (or env.AUDIT_LABEL_KEY) %q: want a label key, [prefix/]name" $labelKey) -}}
{{- end -}}
{{- $rate := int .Values.missedInjection.restartsPerMinute -}}
{{- if or (lt $rate 1) (gt $rate 60) -}}
{{- fail (printf "missedInjection.restartsPerMinute %v: want a whole number from 1 to 60" .Values.missedInjection.restartsPerMinute) -}}
{{- end -}}
{{- $ipv6 := toString (coalesce $env.IPV6_REDIRECT .Values.ipv6Redirect) -}}
{{- $native := toString (coalesce $env.NATIVE_NFTABLES .Values.global.nativeNftables) -}}
{{- if and (regexMatch "^(1|t|T|TRUE|true|True)$" $native) (eq $ipv6 "dual-stack-only") -}}
{{- fail "ipv6Redirect dual-stack-only with global.nativeNftables: upstream's native rules capture IPv6 with IPv4 in one inet table, so IPv6 cannot go direct: use ipv6Redirect always, or nativeNftables false" -}}
{{- end -}}
{{- /* Istio's namespace: env's, else the global one Istio's charts share. */ -}}
{{- $istioNamespace := coalesce (include "istio-cni.envValue" (list $env "ISTIO_NAMESPACE")) .Values.global.istioNamespace "istio-system" -}}
{{- /* The startup taint's key: env's, else istiod's taint.name, so that
      one value names it for both. */ -}}
{{- $taintKey := coalesce (include "istio-cni.envValue" (list $env "TAINT_KEY")) (dig "name" "" (.Values.taint | default dict)) "cni.istio.io/not-ready" -}}
{{- if not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$" $taintKey) -}}
{{- fail (printf "%s %q: want a taint key such as cni.istio.io/not-ready (an optional DNS subdomain and '/', then 1 to 63 letters, digits, '-', '_' and '.')" (ternary "env.TAINT_KEY" "taint.name" (ne (include "istio-cni.envValue" (list $env "TAINT_KEY")) "")) $taintKey) -}}
{{- end -}}
{{- if regexMatch "^([^/]*\\.)?(kubernetes\\.io|k8s\\.io)/" $taintKey -}}
{{- fail (printf "%s %q: a key under kubernetes.io or k8s.io belongs to Kubernetes: want a key of istio-cni's, such as cni.istio.io/not-ready" (ternary "env.TAINT_KEY" "taint.name" (ne (include "istio-cni.envValue" (list $env "TAINT_KEY")) "")) $taintKey) -}}
{{- end -}}
{{- $podWrites := or (has $action (list "delete" "label")) (eq $missed "restart") -}}
{{- /* env may also set the config's shape; it is checked here as the
      agent checks it at start, so a refused shape fails the render
      instead of stopping every node's agent. */ -}}
{{- $c := get $env "CHAINED_CNI_PLUGIN" -}}
{{- if kindIs "bool" $c -}}
{{- $chained = $c -}}
{{- else if and (not (kindIs "invalid" $c)) (ne (toString $c) "") -}}
{{- $chained = has (toString $c) (list "1" "t" "T" "TRUE" "true" "True") -}}
{{- end -}}
{{- /* Upstream's meanings: chained, cniConfFileName names the primary's
      config to chain after (empty: the first, as the runtime picks) and
      istioOwnedCNIConfigFileName our own conflist; standalone,
      cniConfFileName names the config istio-cni writes. */ -}}
{{- $name := "" -}}
{{- $primary := "" -}}
{{- $envName := include "istio-cni.envValue" (list $env "OWNED_CONFIG_NAME") -}}
{{- if $chained -}}
{{- $name = coalesce $envName .Values.istioOwnedCNIConfigFileName "02-istio-cni.conflist" -}}
{{- $primary = .Values.cniConfFileName | default "" -}}
{{- if not (hasSuffix ".conflist" $name) -}}
{{- fail (printf "istioOwnedCNIConfigFileName (or env.OWNED_CONFIG_NAME) %q: chained, istio-cni writes a plugin list: want a name ending in .conflist" $name) -}}
{{- end -}}
{{- else -}}
{{- $name = coalesce $envName .Values.cniConfFileName "istio-cni.conf" -}}
{{- if not (hasSuffix ".conf" $name) -}}
{{- fail (printf "cniConfFileName (or env.OWNED_CONFIG_NAME) %q: standalone (chained false), istio-cni writes one plugin config: want a name ending in .conf" $name) -}}
{{- end -}}
{{- end -}}
{{- if or (ne $name (base $name)) (hasPrefix "." $name) -}}
{{- fail (printf "env.OWNED_CONFIG_NAME %q: want a file name, not a path" $name) -}}
{{- end -}}
{{- $primaryFrom := "cniConfFileName" -}}
{{- if hasKey $env "PRIMARY_CONFIG_NAME" -}}
{{- $primary = include "istio-cni.envValue" (list $env "PRIMARY_CONFIG_NAME") -}}
{{- $primaryFrom = "env.PRIMARY_CONFIG_NAME" -}}
{{- end -}}
{{- if and $primary (or (ne $primary (base $primary)) (hasPrefix "." $primary) (not (regexMatch "\\.(conflist|conf|json)$" $primary))) -}}
{{- fail (printf "%s %q: want the file name of the primary CNI's config (.conflist, .conf or .json)" $primaryFrom $primary) -}}
{{- end -}}
{{- if and $primary (not $chained) -}}
{{- fail (printf "%s %q: a standalone config (chained false) chains after no primary: want it empty" $primaryFrom $primary) -}}
{{- end -}}
{{- /* Standalone, the config is always istio-cni's own. */ -}}
{{- $mode := ternary "owned" "inplace" (or (not $chained) (ne .Values.istioOwnedCNIConfig false)) -}}
{{- $modeFrom := "istioOwnedCNIConfig false" -}}
{{- with include "istio-cni.envValue" (list $env "MODE") -}}
{{- if and (not $chained) (eq . "inplace") -}}
{{- fail "env.MODE inplace: a standalone config (chained false) is always istio-cni's own: want owned" -}}
{{- end -}}
{{- $mode = . -}}
{{- $modeFrom = "env.MODE inplace" -}}
{{- end -}}
{{- if and $primary (eq $mode "inplace") -}}
{{- fail (printf "%s %q with %s: istio-cni's entry would go into a file the runtime may not read first; want istioOwnedCNIConfig true (istio-cni's own copy of that file sorts first) or no %s" $primaryFrom $primary $modeFrom $primaryFrom) -}}
{{- end -}}
{{- if and $primary (eq $primary $name) -}}
{{- fail (printf "%s %q: names istio-cni's own conflist (istioOwnedCNIConfigFileName); want the primary CNI's config" $primaryFrom $primary) -}}
{{- end -}}
{{- $binDir := .Values.cniBinDir -}}
{{- $gke := false -}}
{{- if not $binDir -}}
{{- /* As upstream's chart: a GKE cluster (its version says -gke) keeps
      CNI binaries in /home/kubernetes/bin; /opt/cni/bin is read-only. */ -}}
{{- $gke = or (eq $platform "gke") (contains "-gke" .Capabilities.KubeVersion.GitVersion) -}}
{{- $binDir = ternary "/home/kubernetes/bin" "/opt/cni/bin" $gke -}}
{{- end -}}
{{- $level := coalesce .Values.logging.level .Values.global.logging.level "info" -}}
{{- if not (has $level (list "debug" "info" "warn" "error")) -}}
{{- fail (printf "logging.level (or global.logging.level) %q: want debug, info, warn or error" $level) -}}
{{- end -}}
{{- $image := .Values.image -}}
{{- if not (contains "/" $image) -}}
{{- $image = printf "%s/%s:%s" (coalesce .Values.hub .Values.global.hub) .Values.image (toString (coalesce .Values.tag .Values.global.tag)) -}}
{{- end -}}
cniBinDir: {{ $binDir | quote }}
gkeDetected: {{ and $gke (ne $platform "gke") }}
cniConfDir: {{ .Values.cniConfDir | default "/etc/cni/net.d" | quote }}
cniNetnsDir: {{ .Values.cniNetnsDir | default "/var/run/netns" | quote }}
chained: {{ $chained }}
cniConfFileName: {{ $name | quote }}
primaryConfFileName: {{ $primary | quote }}
mode: {{ $mode | quote }}
logLevel: {{ $level | quote }}
provider: {{ .Values.provider | default "default" | quote }}
resourceQuotas: {{ $quota }}
seLinuxOptions: {{ toJson $se }}
auditAction: {{ $action | quote }}
auditLabelKey: {{ $labelKey | quote }}
missedInjection: {{ $missed | quote }}
missedRestartsPerMinute: {{ $rate }}
istioNamespace: {{ $istioNamespace | quote }}
taintKey: {{ $taintKey | quote }}
podWrites: {{ $podWrites }}
image: {{ $image | quote }}
openshift: {{ eq $platform "openshift" }}
clusterScope: {{ has .Values.global.resourceScope (list "all" "cluster") }}
namespaceScope: {{ has .Values.global.resourceScope (list "all" "namespace") }}
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

{{/*
istio-cni.notes: one line for each upstream value given that cannot apply
here, saying why (NOTES.txt prints them at install).
*/}}
{{- define "istio-cni.notes" -}}
{{- include "istio-cni.values" . -}}
{{- $s := include "istio-cni.settings" . | fromYaml -}}
{{- with coalesce .Values.variant .Values.global.variant }}
- variant {{ . }}: istio-cni has one image (static binaries and iptables); the variant is not used.
{{- end }}
{{- if not .Values.global.logAsJson }}
- global.logAsJson false: the agent and the plugin log JSON lines, always.
{{- end }}
{{- if .Values.global.networkPolicy.enabled }}
- global.networkPolicy.enabled: the agent runs on the host network, which NetworkPolicies do not select; none is rendered.
{{- end }}
{{- $last := last (splitList "/" $s.image) -}}
{{- $tag := ternary (last (splitList ":" $last)) "" (and (contains ":" $last) (not (contains "@" $last))) -}}
{{- if and $tag (not (or (hasPrefix .Chart.AppVersion $tag) (hasPrefix (printf "v%s" .Chart.AppVersion) $tag))) }}
- global.hub, global.tag: the image is {{ $s.image }}, not tagged istio-cni's {{ .Chart.AppVersion }}. If it is upstream's install-cni image (upstream's values file names it), it does not run here: its pods fail at start (the DaemonSet runs /install-cni, which only istio-cni's image has); set global.hub and global.tag, or image, to where istio-cni's image is. If it is istio-cni's image under another tag, nothing needs changing.
{{- end }}
{{- if or .Values.repair.hub .Values.repair.tag }}
- repair.hub, repair.tag: the agent's own image repairs pods; no other image is used.
{{- end }}
{{- if gt (len (omit (.Values.ambient | default dict) "enabled")) 0 }}
- ambient.*: istio-cni is sidecar-only; ambient settings have no effect.
{{- end }}
{{- with .Values.compatibilityVersion }}
- compatibilityVersion {{ . }}: upstream's changes between versions concern ambient mode and istiod; none applies to istio-cni.
{{- end }}
{{- $others := list -}}
{{- range $k := list "pilot" "meshConfig" "ztunnel" "gateways" "istiodRemote" "telemetry" "experimental" "sidecarInjectorWebhook" "base" "istio_cni" "revisionTags" "configMap" "trustedZtunnelNamespace" -}}
{{- if hasKey $.Values $k }}{{ $others = append $others $k }}{{ end -}}
{{- end -}}
{{- range $k := list "proxy" "waypoint" "omitSidecarInjectorConfigMap" "arch" "caAddress" "caName" "certSigners" "configCluster" "configValidation" "defaultNodeSelector" "defaultPodDisruptionBudget" "defaultTolerations" "enableReaderRBAC" "externalIstiod" "istiod" "meshID" "meshNetworks" "mountMtlsCerts" "multiCluster" "network" "operatorManageWebhooks" "pilotCertProvider" "priorityClassName" "proxy_init" "remotePilotAddress" "sds" "sts" -}}
{{- if hasKey $.Values.global $k }}{{ $others = append $others (printf "global.%s" $k) }}{{ end -}}
{{- end -}}
{{- with $others }}
- {{ join ", " . }}: values of Istio's other charts (istiod, ztunnel, gateways); not used by istio-cni.
{{- end }}
{{- if $s.gkeDetected }}
- GKE detected (the server's version says -gke): CNI binaries go to /home/kubernetes/bin; set cniBinDir to choose.
{{- end }}
{{- end -}}

{{/*
istio-cni.checkEnv: env's settings as the agent parses them at start
(install-cni --help), so a value it would refuse fails the render, naming
the key, instead of stopping every node's agent. An empty value leaves the
setting to the chart. Which keys env takes, values.schema.json says.
*/}}
{{- define "istio-cni.checkEnv" -}}
{{- $env := . -}}
{{- $checks := dict
  "LOG_LEVEL" (list "^(?i)(debug|info|warn|error)$" "debug, info, warn or error")
  "IPV6_REDIRECT" (list "^(always|dual-stack-only)$" "always or dual-stack-only")
  "IPTABLES_BACKEND" (list "^(auto|legacy|nft)$" "auto, legacy or nft")
  "AUDIT_ACTION" (list "^(repair|delete|label|report|off)$" "repair, delete, label, report or off")
  "MISSED_INJECTION" (list "^(report|restart|off)$" "report, restart or off")
  "MODE" (list "^(owned|inplace)$" "owned or inplace")
  "CHAINED_CNI_PLUGIN" (list "^(1|t|T|TRUE|true|True|0|f|F|FALSE|false|False)$" "true or false")
  "NODE_TAINT" (list "^(1|t|T|TRUE|true|True|0|f|F|FALSE|false|False)$" "true or false")
  "NATIVE_NFTABLES" (list "^(1|t|T|TRUE|true|True|0|f|F|FALSE|false|False)$" "true or false")
  "CNI_CONF_GROUP_READ" (list "^(1|t|T|TRUE|true|True|0|f|F|FALSE|false|False)$" "true or false")
  "CONFLICT_REPAIRS" (list "^0*([2-9]|[1-9][0-9]+)$" "a whole number of at least 2")
  "MISSED_INJECTION_RESTARTS_PER_MINUTE" (list "^0*([1-9]|[1-5][0-9]|60)$" "a whole number from 1 to 60")
  "ISTIO_NAMESPACE" (list "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" "a namespace name: 1 to 63 lower-case letters, digits and '-'")
  "EXCLUDE_NAMESPACES" (list "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(,[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$" "namespace names, comma-separated")
  "VALIDATION_CONTAINER" (list "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" "a container name: 1 to 63 lower-case letters, digits and '-'")
  "AUDIT_LABEL_VALUE" (list "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$" "a label value")
  "HEALTH_ADDR" (list "^(\\[[^]]*\\]|[^:\\[\\]]*):[^:\\[\\]]*$" "host:port or :port")
  "METRICS_ADDR" (list "^(\\[[^]]*\\]|[^:\\[\\]]*):[^:\\[\\]]*$" "host:port or :port")
-}}
{{- range $k, $c := $checks -}}
{{- $v := include "istio-cni.envValue" (list $env $k) -}}
{{- if and (eq $k "CHAINED_CNI_PLUGIN" "NODE_TAINT") (eq $v "off") }}{{ $v = "false" }}{{ end -}}
{{- if and $v (not (regexMatch (index $c 0) $v)) -}}
{{- fail (printf "env.%s %q: want %s" $k $v (index $c 1)) -}}
{{- end -}}
{{- end -}}
{{- /* Durations, with the agent's bounds in seconds (-1: none). */ -}}
{{- $durations := dict
  "AUDIT_INTERVAL" (list 1 3600 "a duration from 1s to 1h")
  "AUDIT_CONFIRM" (list 0 60 "a duration from 0s to 1m")
  "TAINT_GRACE" (list 1 600 "a duration from 1s to 10m")
  "PLUGIN_TOKEN_TTL" (list 600 86400 "a duration from 10m to 24h")
  "CONFLICT_WINDOW" (list 0.000000001 -1 "a duration such as 30s")
  "RUNTIME_DRAIN" (list 0 10 "a duration from 0s to 10s")
-}}
{{- range $k, $b := $durations -}}
{{- $v := include "istio-cni.envValue" (list $env $k) -}}
{{- if $v -}}
{{- $sec := include "istio-cni.seconds" $v -}}
{{- if or (eq $sec "invalid") (lt (float64 $sec) (float64 (index $b 0))) (and (ge (float64 (index $b 1)) 0.0) (gt (float64 $sec) (float64 (index $b 1)))) -}}
{{- fail (printf "env.%s %q: want %s" $k $v (index $b 2)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k := list "CNI_BIN_DIR" "SERVICE_ACCOUNT_DIR" "PLUGIN_SOURCE" -}}
{{- $v := include "istio-cni.envValue" (list $env $k) -}}
{{- if and $v (not (isAbs $v)) -}}
{{- fail (printf "env.%s %q: want an absolute path" $k $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* istio-cni.seconds: a Go duration (time.ParseDuration) in seconds, or "invalid". */}}
{{- define "istio-cni.seconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- if eq . "0" -}}0
{{- else if not (regexMatch "^([0-9]*[.]?[0-9]+|[0-9]+[.])(ns|us|µs|ms|s|m|h)(([0-9]*[.]?[0-9]+|[0-9]+[.])(ns|us|µs|ms|s|m|h))*$" .) -}}invalid
{{- else -}}
{{- $sum := 0.0 -}}
{{- range regexFindAll "([0-9]*[.]?[0-9]+|[0-9]+[.])(ns|us|µs|ms|s|m|h)" . -1 -}}
{{- $n := regexFind "^[0-9.]+" . -}}
{{- $sum = addf $sum (mulf (float64 $n) (get $units (trimPrefix $n .))) -}}
{{- end -}}
{{- $sum -}}
{{- end -}}
{{- end -}}
