{{/* Names, labels and the shared pod spec of the ebbtide components. */}}

{{- define "ebbtide.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ebbtide.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "ebbtide.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ebbtide.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ebbtide.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ebbtide.labels" -}}
helm.sh/chart: {{ include "ebbtide.chart" . }}
{{ include "ebbtide.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ebbtide
{{- end }}

{{/* A component's object name: <fullname>-<component>. Call with (list $ "optimizer"). */}}
{{- define "ebbtide.componentName" -}}
{{- $root := index . 0 }}
{{- printf "%s-%s" (include "ebbtide.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ebbtide.componentSelectorLabels" -}}
{{ include "ebbtide.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "ebbtide.componentLabels" -}}
{{ include "ebbtide.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "ebbtide.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The workload namespaces: workloadNamespaces, or the release's. */}}
{{- define "ebbtide.workloadNamespaces" -}}
{{- toJson (.Values.workloadNamespaces | default (list .Release.Namespace)) }}
{{- end }}

{{/* The components that talk to the Kubernetes API, each under its own account and RBAC. */}}
{{- define "ebbtide.kubeComponent" -}}
{{- if has . (list "actuator" "source") }}true{{ end }}
{{- end }}

{{/* The service account a component runs as: the actuator's or the source's own (with RBAC), or
the shared one (no rights, no token). */}}
{{- define "ebbtide.serviceAccountName" -}}
{{- $root := index . 0 }}
{{- if include "ebbtide.kubeComponent" (index . 1) }}
{{- include "ebbtide.componentName" (list $root (index . 1)) }}
{{- else }}
{{- include "ebbtide.fullname" $root }}
{{- end }}
{{- end }}

{{/* The pod template of one component. Call with (list $ name component-values). */}}
{{- define "ebbtide.podTemplate" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $c := index . 2 }}
{{- $v := $root.Values -}}
metadata:
  labels:
    {{- include "ebbtide.componentSelectorLabels" (list $root $name) | nindent 4 }}
  annotations:
    {{- if $v.clusterSpec }}
    checksum/cluster-spec: {{ toYaml $v.clusterSpec | sha256sum }}
    {{- end }}
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ $v.metrics.port | quote }}
    prometheus.io/path: /metrics
spec:
  serviceAccountName: {{ include "ebbtide.serviceAccountName" (list $root $name) }}
  automountServiceAccountToken: {{ include "ebbtide.kubeComponent" $name | eq "true" }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml $v.podSecurityContext | nindent 4 }}
  containers:
    - name: {{ $name }}
      image: {{ include "ebbtide.image" $root | quote }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      args: ["run", {{ $name | quote }}]
      env:
        - name: EBBTIDE_CLUSTER
          value: {{ $v.cluster | quote }}
        - name: EBBTIDE_STEP_S
          value: {{ $v.stepSeconds | quote }}
        - name: EBBTIDE_HORIZON_STEPS
          value: {{ $v.horizonSteps | quote }}
        - name: EBBTIDE_METRICS_PORT
          value: {{ $v.metrics.port | quote }}
        - name: EBBTIDE_KAFKA__BOOTSTRAP_SERVERS
          value: {{ $v.kafka.bootstrapServers | quote }}
        - name: EBBTIDE_KAFKA_BOOTSTRAP
          value: {{ $v.kafka.bootstrapServers | quote }}
        - name: EBBTIDE_KAFKA__CREATE_TOPICS
          value: {{ $v.kafka.createTopics | quote }}
        - name: EBBTIDE_KAFKA__GROUP_PREFIX
          value: {{ include "ebbtide.fullname" $root | quote }}
        - name: EBBTIDE_KAFKA__REPLICATION_FACTOR
          value: {{ $v.kafka.replicationFactor | quote }}
        - name: EBBTIDE_KAFKA__MIN_INSYNC_REPLICAS
          value: {{ $v.kafka.minInsyncReplicas | quote }}
        {{- include "ebbtide.kafkaSecurityEnv" (list $root $name) | nindent 8 }}
        {{- if $v.clusterSpec }}
        - name: EBBTIDE_CLUSTER_SPEC
          value: /etc/ebbtide/cluster.yaml
        {{- end }}
        {{- if include "ebbtide.kubeComponent" $name }}
        - name: EBBTIDE_ACTUATOR__KUBERNETES__NAMESPACES
          value: {{ include "ebbtide.workloadNamespaces" $root | quote }}
        {{- end }}
        {{- if eq $name "collector" }}
        - name: EBBTIDE_COLLECTOR__NODE
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        {{- end }}
        - name: HOME
          value: /tmp
        - name: EBBTIDE_CACHE_DIR
          value: /tmp/ebbtide
        - name: MPLCONFIGDIR
          value: /tmp/matplotlib
        {{- range $key, $value := merge (deepCopy (default dict $c.env)) $v.env }}
        - name: {{ $key }}
          value: {{ $value | quote }}
        {{- end }}
      ports:
        - name: metrics
          containerPort: {{ $v.metrics.port }}
          protocol: TCP
      startupProbe:
        httpGet: {path: /metrics, port: metrics}
        {{- toYaml $v.probes.startup | nindent 8 }}
      livenessProbe:
        # 200 only while the service's loop has stepped recently (EBBTIDE_HEALTH_STALE_AFTER_S)
        httpGet: {path: /healthz, port: metrics}
        {{- toYaml $v.probes.liveness | nindent 8 }}
      readinessProbe:
        httpGet: {path: /metrics, port: metrics}
        {{- toYaml $v.probes.readiness | nindent 8 }}
      resources:
        {{- toYaml $c.resources | nindent 8 }}
      securityContext:
        {{- toYaml $v.securityContext | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- if $v.clusterSpec }}
        - name: cluster-spec
          mountPath: /etc/ebbtide
          readOnly: true
        {{- end }}
        {{- if include "ebbtide.kafkaCredentialSources" (list $root $name) }}
        - name: kafka-credentials
          mountPath: {{ include "ebbtide.kafkaCredentialsDir" . }}
          readOnly: true
        {{- end }}
  volumes:
    - name: tmp
      emptyDir: {}
    {{- with include "ebbtide.kafkaCredentialSources" (list $root $name) }}
    - name: kafka-credentials
      projected:
        defaultMode: 0440
        sources:
          {{- . | trim | nindent 10 }}
    {{- end }}
    {{- if $v.clusterSpec }}
    - name: cluster-spec
      configMap:
        name: {{ include "ebbtide.fullname" $root }}-cluster-spec
    {{- end }}
  {{- with (default $v.nodeSelector $c.nodeSelector) }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with (default $v.tolerations $c.tolerations) }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with (default $v.affinity $c.affinity) }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}


{{/* Where a component's Kafka credentials (from Kubernetes Secrets) are mounted, as files. */}}
{{- define "ebbtide.kafkaCredentialsDir" -}}
/var/run/ebbtide/kafka
{{- end }}

{{/* The projected-volume sources of one component's Kafka credentials (empty: none). Each Secret
named in kafka.security gives the component its own key: the SASL password or OIDC client secret
under the component's name, the CA bundle, and the component's own TLS Secret for mTLS.
Call with (list $ name). */}}
{{- define "ebbtide.kafkaCredentialSources" -}}
{{- $name := index . 1 }}
{{- $sec := (index . 0).Values.kafka.security }}
{{- $mechanism := $sec.sasl.mechanism }}
{{- if and (has $mechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512")) $sec.sasl.passwordsSecret }}
- secret:
    name: {{ $sec.sasl.passwordsSecret }}
    items: [{key: {{ $name }}, path: sasl-password}]
{{- end }}
{{- if and (eq $mechanism "OAUTHBEARER") $sec.sasl.oauthbearer.clientSecretsSecret }}
- secret:
    name: {{ $sec.sasl.oauthbearer.clientSecretsSecret }}
    items: [{key: {{ $name }}, path: oauthbearer-client-secret}]
{{- end }}
{{- if $sec.tls.caSecret }}
- secret:
    name: {{ $sec.tls.caSecret }}
    items: [{key: {{ $sec.tls.caKey | quote }}, path: ca.crt}]
{{- end }}
{{- if $sec.tls.clientCertSecretPrefix }}
- secret:
    name: {{ printf "%s%s" $sec.tls.clientCertSecretPrefix $name }}
    items: [{key: tls.crt, path: client.crt}, {key: tls.key, path: client.key}]
{{- end }}
{{- end }}

{{/* The EBBTIDE_KAFKA__* security settings of one component, pointing at the mounted files.
Call with (list $ name). */}}
{{- define "ebbtide.kafkaSecurityEnv" -}}
{{- $name := index . 1 }}
{{- $sec := (index . 0).Values.kafka.security }}
{{- $dir := include "ebbtide.kafkaCredentialsDir" . }}
{{- $mechanism := $sec.sasl.mechanism }}
- name: EBBTIDE_KAFKA__SECURITY_PROTOCOL
  value: {{ $sec.protocol | quote }}
{{- if $mechanism }}
- name: EBBTIDE_KAFKA__SASL_MECHANISM
  value: {{ $mechanism | quote }}
{{- end }}
{{- if has $mechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512") }}
- name: EBBTIDE_KAFKA__SASL_USERNAME
  value: {{ printf "%s%s" $sec.sasl.usernamePrefix $name | quote }}
- name: EBBTIDE_KAFKA__SASL_PASSWORD_FILE
  value: {{ printf "%s/sasl-password" $dir | quote }}
{{- end }}
{{- if eq $mechanism "OAUTHBEARER" }}
- name: EBBTIDE_KAFKA__OAUTHBEARER_TOKEN_ENDPOINT_URL
  value: {{ $sec.sasl.oauthbearer.tokenEndpointUrl | quote }}
- name: EBBTIDE_KAFKA__OAUTHBEARER_CLIENT_ID
  value: {{ printf "%s%s" $sec.sasl.usernamePrefix $name | quote }}
- name: EBBTIDE_KAFKA__OAUTHBEARER_CLIENT_SECRET_FILE
  value: {{ printf "%s/oauthbearer-client-secret" $dir | quote }}
{{- with $sec.sasl.oauthbearer.scope }}
- name: EBBTIDE_KAFKA__OAUTHBEARER_SCOPE
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if $sec.tls.caSecret }}
- name: EBBTIDE_KAFKA__SSL_CA_LOCATION
  value: {{ printf "%s/ca.crt" $dir | quote }}
{{- end }}
{{- if $sec.tls.clientCertSecretPrefix }}
- name: EBBTIDE_KAFKA__SSL_CERTIFICATE_LOCATION
  value: {{ printf "%s/client.crt" $dir | quote }}
- name: EBBTIDE_KAFKA__SSL_KEY_LOCATION
  value: {{ printf "%s/client.key" $dir | quote }}
{{- end }}
{{- end }}
