{{- define "gpuwarden.name" -}}{{ .Release.Name }}-gpuwarden{{- end -}}

{{- define "gpuwarden.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}

{{- define "gpuwarden.labels" -}}
app.kubernetes.io/name: gpuwarden
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "gpuwarden.selector" -}}
app.kubernetes.io/name: gpuwarden
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuwarden.secretName" -}}{{ .Values.existingSecret | default (printf "%s-secrets" (include "gpuwarden.name" .)) }}{{- end -}}

{{/* The one secret source of every workload that reads the config (agent, streams, notify,
scheduler): a {env: NAME} anywhere in it resolves in each. The chart's Secret when `secrets` has
entries, the operator's when `existingSecret` names one (required: a missing one is an error
Kubernetes shows); with neither, the default name is optional, so a default install starts. */}}
{{- define "gpuwarden.envFrom" -}}
envFrom:
  - secretRef:
      name: {{ include "gpuwarden.secretName" . }}
      {{- if not (or .Values.secrets .Values.existingSecret) }}
      optional: true
      {{- end }}
{{- end -}}

{{/* Pod annotations: a changed config or secret rolls the pods. */}}
{{- define "gpuwarden.podAnnotations" -}}
checksum/config: {{ include "gpuwarden.config" . | sha256sum }}
checksum/secrets: {{ toJson .Values.secrets | sha256sum }}
{{- end -}}

{{/* The config every pod mounts: the user's, with Kafka and the metrics endpoints set by the chart. */}}
{{- define "gpuwarden.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- $_ := set $c "kafka" (merge (dict "bootstrap" .Values.kafka.bootstrap) (get $c "kafka" | default dict)) -}}
{{- $_ := set $c "spool" (merge (dict "path" "/var/lib/gpuwarden/spool.db") (get $c "spool" | default dict)) -}}
{{- $_ := set $c "agent" (merge (dict "metrics_port" 9400 "metrics_bind" "0.0.0.0") (get $c "agent" | default dict)) -}}
{{- $_ := set $c "engine" (merge (dict "metrics_port" 9401 "metrics_bind" "0.0.0.0") (get $c "engine" | default dict)) -}}
{{- $_ := set $c "notify" (merge (dict "metrics_port" 9402 "metrics_bind" "0.0.0.0") (get $c "notify" | default dict)) -}}
{{- $_ := set $c "scheduler" (merge (dict "metrics_port" 9403 "metrics_bind" "0.0.0.0") (get $c "scheduler" | default dict)) -}}
{{- toYaml $c -}}
{{- end -}}

{{/* Pod-level pieces shared by every workload. */}}
{{- define "gpuwarden.podCommon" -}}
{{- $ := .root -}}
containers:
  - name: {{ .component }}
    image: {{ include "gpuwarden.image" $ }}
    imagePullPolicy: {{ $.Values.image.pullPolicy }}
    args: {{ toJson .args }}
    env:
      - name: GPUWARDEN_CONFIG
        value: /etc/gpuwarden/gpuwarden.yaml
      {{- with .env }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- include "gpuwarden.envFrom" $ | nindent 4 }}
    ports:
      - name: metrics
        containerPort: {{ .port }}
    # /-/ready: doing its job (the agent publishing, a worker's inputs moving, a route with a
    # receiver that answers); /-/healthy: the process serves. docs/kubernetes.md, "Health and readiness".
    readinessProbe:
      httpGet: {path: /-/ready, port: metrics}
      periodSeconds: 10
      failureThreshold: 3
    livenessProbe:
      httpGet: {path: /-/healthy, port: metrics}
      initialDelaySeconds: 30
      periodSeconds: 30
    resources:
      {{- toYaml .resources | nindent 6 }}
    {{- with .securityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    volumeMounts:
      - name: config
        mountPath: /etc/gpuwarden
        readOnly: true
      {{- with .mounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
volumes:
  - name: config
    configMap:
      name: {{ include "gpuwarden.name" $ }}-config
  {{- with .volumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}
