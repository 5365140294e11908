{{/*
The base of every object's name: fullnameOverride, else the release name. At most 30
characters, so that `<base>-verifier-<key>` (keys ≤ 16) and the StatefulSet's
`controller-revision-hash` label (`<base>-provider-<hash>`) stay within 63.
*/}}
{{- define "cm.base" -}}
{{- $base := default .Release.Name .Values.fullnameOverride -}}
{{- if gt (len $base) 30 -}}
{{- fail (printf "the release name %q is longer than 30 characters: set fullnameOverride to a shorter name" $base) -}}
{{- end -}}
{{- $base -}}
{{- end -}}

{{- define "cm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries; `component` is passed as .component. */}}
{{- define "cm.labels" -}}
helm.sh/chart: {{ include "cm.chart" .root }}
{{ include "cm.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: compute-market
{{- end -}}

{{- define "cm.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The label the ServiceMonitor selects Services by. */}}
{{- define "cm.metricsLabel" -}}
compute-market.io/metrics: "true"
{{- end -}}

{{- define "cm.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag -}}
{{- if eq $tag "latest" -}}
{{- fail "image tag `latest` is refused: pin a release" -}}
{{- end -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}

{{- define "cm.providerName" -}}{{ include "cm.base" . }}-provider{{- end -}}
{{- define "cm.storeName" -}}{{ include "cm.base" . }}-store{{- end -}}
{{- define "cm.rayName" -}}{{ include "cm.base" . }}-ray{{- end -}}

{{/*
terminationGracePeriodSeconds of a provider: the longest a task it holds can still need it,
ceil((submit + 2·(join + commit + reveal) + dispute) · slotSeconds), plus 60 s.
*/}}
{{- define "cm.providerGrace" -}}
{{- $w := .Values.market.windows -}}
{{- $slots := add $w.submit (mul 2 (add $w.join $w.commit $w.reveal)) $w.dispute -}}
{{- add (ceil (mulf $slots .Values.market.slotSeconds)) 60 | int -}}
{{- end -}}

{{/* terminationGracePeriodSeconds of a verifier: ceil((join + commit + reveal) · slotSeconds) + 60 s. */}}
{{- define "cm.verifierGrace" -}}
{{- $w := .Values.market.windows -}}
{{- $slots := add $w.join $w.commit $w.reveal -}}
{{- add (ceil (mulf $slots .Values.market.slotSeconds)) 60 | int -}}
{{- end -}}

{{/* Pod-level security: a fixed non-root user, RuntimeDefault seccomp. */}}
{{- define "cm.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container-level security: read-only root, no privilege escalation, no capabilities. */}}
{{- define "cm.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The arguments every `keeper run` gets: RPC, market, store, listen. */}}
{{- define "cm.runArgs" -}}
- --url
- {{ .Values.rpc.url | quote }}
{{- if not (kindIs "invalid" .Values.market.id) }}
- --market
- {{ .Values.market.id | int | quote }}
{{- end }}
- --store
- /var/lib/compute-market/keeper.redb
- --results-dir
- /var/lib/compute-market/results
- --listen
- {{ printf "0.0.0.0:%d" (int .Values.port) | quote }}
{{- if .Values.allowPrivateUrls }}
- --allow-private-urls
{{- end }}
{{- end -}}

{{/* HTTP probes of a keeper: startup and liveness on /livez, readiness on /readyz. */}}
{{- define "cm.keeperProbes" -}}
startupProbe:
  httpGet:
    path: /livez
    port: http
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: {{ div (add .startupSeconds 9) 10 }}
livenessProbe:
  httpGet:
    path: /livez
    port: http
  periodSeconds: 20
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- end -}}
