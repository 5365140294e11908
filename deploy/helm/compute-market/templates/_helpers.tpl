{{/*
The base of every object's name: fullnameOverride, else the release name. At most 30
characters, so that the provider StatefulSet's `controller-revision-hash` label
(`<base>-provider-<hash>`, the hash up to 10 characters) stays within 63. A verifier's
StatefulSet `<base>-verifier-<key>` is checked where it is rendered: at most 52 characters.
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

{{/*
An image reference: `<repository>:<tag>` (tag default: the chart's appVersion; `latest`
refused). `.suffix`, when set, is appended to the tag unless the tag already ends with it (the
providers' `-cuda` image, `image.cudaTagSuffix`). `.value` names the repository's value in
messages (default `image.repository`), `.example` an example of it. An empty repository is
refused: the project publishes no image, so there is no default to pull (values.schema.json
refuses it first; this catches `--skip-schema-validation`).
*/}}
{{- define "cm.image" -}}
{{- if not .image.repository -}}
{{- fail (printf "%s is empty: set it to the repository you pushed the image to (say %s): the project publishes no image (docs/operators.md §3)" (default "image.repository" .value) (default "registry.example.org/compute-market/keeper" .example)) -}}
{{- end -}}
{{- $tag := default .root.Chart.AppVersion .image.tag -}}
{{- if eq $tag "latest" -}}
{{- fail "image tag `latest` is refused: pin a release" -}}
{{- end -}}
{{- $suffix := default "" .suffix -}}
{{- if and $suffix (not (hasSuffix $suffix $tag)) -}}
{{- $tag = printf "%s%s" $tag $suffix -}}
{{- end -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}

{{/* The providers' image: the keeper image with `image.cudaTagSuffix` when they have GPUs. */}}
{{- define "cm.providerImage" -}}
{{- $suffix := ternary .Values.image.cudaTagSuffix "" (gt (int .Values.providers.gpus) 0) -}}
{{- include "cm.image" (dict "root" . "image" .Values.image "suffix" $suffix) -}}
{{- end -}}

{{- define "cm.providerName" -}}{{ include "cm.base" . }}-provider{{- end -}}
{{- define "cm.storeName" -}}{{ include "cm.base" . }}-store{{- end -}}
{{- define "cm.rayName" -}}{{ include "cm.base" . }}-ray{{- end -}}

{{/* The provider ordinals' Secrets: `<prefix><ordinal>`; default prefix `<base>-provider-`. */}}
{{- define "cm.providerSecretPrefix" -}}
{{- default (printf "%s-" (include "cm.providerName" .)) .Values.providers.keySecretPrefix -}}
{{- end -}}

{{/* Every ordinal the provider StatefulSet may run: its replicas, or the autoscaler's maximum. */}}
{{- define "cm.providerOrdinals" -}}
{{- $p := .Values.providers -}}
{{- ternary (int $p.autoscaling.maxReplicas) (int $p.replicas) $p.autoscaling.enabled -}}
{{- end -}}

{{/* The verifiers' Secrets: `<prefix><key>`; default prefix `<base>-verifier-`. */}}
{{- define "cm.verifierSecretPrefix" -}}
{{- default (printf "%s-verifier-" (include "cm.base" .)) .Values.verifiers.keySecretPrefix -}}
{{- end -}}

{{/* The Ray pool's provider Secret: ray.keySecret; default `<base>-ray-provider`. */}}
{{- define "cm.raySecret" -}}
{{- default (printf "%s-ray-provider" (include "cm.base" .)) .Values.ray.keySecret -}}
{{- end -}}

{{/*
Refuses two roles on one key Secret. Each Secret is one staked key, and each key must be one
keeper: the Secret names of the provider ordinals (all of them, up to the autoscaler's
maximum), of the verifiers (one per key) and of the Ray pool's provider must be pairwise
distinct. A Secret named twice would run two keepers for one node, each with its own store
(two providers claiming and submitting under one key, or a node voting on its own results).
*/}}
{{- define "cm.checkKeySecrets" -}}
{{- $seen := dict -}}
{{- if .Values.providers.enabled }}
{{- $prefix := include "cm.providerSecretPrefix" . -}}
{{- range $i := until (include "cm.providerOrdinals" . | int) }}
{{- $_ := set $seen (printf "%s%d" $prefix $i) (printf "provider ordinal %d (providers.keySecretPrefix %q)" $i $prefix) -}}
{{- end }}
{{- end }}
{{- if .Values.verifiers.enabled }}
{{- $prefix := include "cm.verifierSecretPrefix" . -}}
{{- range $key := .Values.verifiers.keys }}
{{- $secret := printf "%s%s" $prefix $key -}}
{{- $role := printf "the verifier of key %q (verifiers.keySecretPrefix %q)" $key $prefix -}}
{{- if hasKey $seen $secret }}
{{- fail (printf "the key Secret %q is used by both %s and %s: one Secret is one staked key, and two keepers on one key act for one node, each with its own store. Give each role its own Secret names (providers.keySecretPrefix, verifiers.keySecretPrefix, ray.keySecret)." $secret (get $seen $secret) $role) }}
{{- end }}
{{- $_ := set $seen $secret $role -}}
{{- end }}
{{- end }}
{{- if .Values.ray.enabled }}
{{- $secret := include "cm.raySecret" . -}}
{{- if hasKey $seen $secret }}
{{- fail (printf "the key Secret %q is used by both %s and the Ray pool's provider (ray.keySecret): one Secret is one staked key, and two keepers on one key act for one node, each with its own store. Give each role its own Secret names (providers.keySecretPrefix, verifiers.keySecretPrefix, ray.keySecret)." $secret (get $seen $secret)) }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
terminationGracePeriodSeconds of a provider: the longest a task it holds can still need it
(docs/PROTOCOL.md §3.8, `longest_task` of §8.1): submit, a round, an escalated round, and two
dispute windows (a dispute opened in the window's last slot has one more window to end), plus
60 s for passes and transactions:
  ceil((submit + 2·(join + commit + reveal) + 2·dispute) · slotSeconds) + 60
*/}}
{{- define "cm.providerGrace" -}}
{{- $w := .Values.market.windows -}}
{{- $slots := add $w.submit (mul 2 (add $w.join $w.commit $w.reveal)) (mul 2 $w.dispute) -}}
{{- add (ceil (mulf $slots .Values.market.slotSeconds)) 60 | int -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds of a verifier: a seat joined just before the signal (join,
commit, reveal), then the verdict it voted in held for the dispute window, and a dispute of it
opened in that window's last slot, which stays open up to another window while the verifier
defends it (§3.8, `longest_task` of §8.1: two dispute windows, as for a provider), plus 60 s:
  ceil((join + commit + reveal + 2·dispute) · slotSeconds) + 60
*/}}
{{- define "cm.verifierGrace" -}}
{{- $w := .Values.market.windows -}}
{{- $slots := add $w.join $w.commit $w.reveal (mul 2 $w.dispute) -}}
{{- add (ceil (mulf $slots .Values.market.slotSeconds)) 60 | int -}}
{{- end -}}

{{/*
Refuses a public URL longer than 56 bytes. A node announces an endpoint of at most 56 bytes
(else none), and a provider publishes each result as `<URL>/r/<64 hex>` (the URL + 67 bytes),
which the program caps at 128 bytes (`UriTooLong`: every submit fails, the task is reclaimed
and the provider slashed late). Arguments: .url (as rendered for the longest pod name),
.value (the value that sets it), .who (the pod or key it was rendered for), .hint.
*/}}
{{- define "cm.checkPublicUrl" -}}
{{- if gt (len .url) 56 -}}
{{- fail (printf "%s gives %s the public URL %q of %d bytes, over the limit of 56 bytes: a node announces an endpoint of at most 56 bytes, and a provider's result URIs (<URL>/r/<64 hex>, 67 bytes more) must stay within the program's 128 (UriTooLong). %s" .value .who .url (len .url) .hint) -}}
{{- end -}}
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
