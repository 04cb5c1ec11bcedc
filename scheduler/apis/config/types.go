// Package config holds the arguments of the td3score plugin, with their defaults (defaults.go) and
// their validation (validation.go), in the layout of kubernetes-sigs/scheduler-plugins' apis/config.
//
// The arguments reach the plugin as the raw JSON of the KubeSchedulerConfiguration's pluginConfig
// entry (kube-scheduler keeps the args of plugins it does not know as runtime.Unknown); the plugin
// decodes them into TD3ScoreArgs, applies SetDefaults and refuses what Validate rejects.
package config

// TD3ScoreArgs are the td3score plugin's arguments (pluginConfig[].args, JSON / YAML field names).
type TD3ScoreArgs struct {
	// EngineAddress is the decision engine's gRPC address, host:port ("127.0.0.1:50051").
	EngineAddress string `json:"engineAddress,omitempty"`
	// EngineTimeoutMillis is the deadline of one ScoreNodes call; past it Score uses the static score.
	EngineTimeoutMillis *int64 `json:"engineTimeoutMillis,omitempty"`
	// BindingTimeoutMillis is the deadline of one ReportBinding call (PostBind; off the scheduling path).
	BindingTimeoutMillis *int64 `json:"bindingTimeoutMillis,omitempty"`
	// TLS of the engine connection; nil: plaintext (loopback or a service mesh).
	TLS *TLSArgs `json:"tls,omitempty"`

	// MetricsSource is where the live node metrics come from: "engine" (the engine's copy, GetNodeMetrics;
	// Prometheus is queried directly only when the engine does not answer or its own refresh failed) or
	// "prometheus" (always queried directly).
	MetricsSource string `json:"metricsSource,omitempty"`
	// PrometheusURL is where the live node metrics are read (the engine's own Prometheus).
	PrometheusURL string `json:"prometheusURL,omitempty"`
	// MetricsIntervalSeconds is how often the node metrics are refreshed in the background.
	MetricsIntervalSeconds *float64 `json:"metricsIntervalSeconds,omitempty"`
	// MetricsTimeoutSeconds is the deadline of one Prometheus query or GetNodeMetrics call.
	MetricsTimeoutSeconds *float64 `json:"metricsTimeoutSeconds,omitempty"`
	// MetricsMaxAgeSeconds: a node's metrics older than this are stale (the engine's staleness.max_age_s).
	MetricsMaxAgeSeconds *float64 `json:"metricsMaxAgeSeconds,omitempty"`
	// Queries replace some of the default PromQL queries (the engine's prometheus.queries).
	Queries map[string]string `json:"queries,omitempty"`

	// SafetyCPUUtil: Filter drops a node whose observed CPU is above this share of its CPU capacity.
	SafetyCPUUtil *float64 `json:"safetyCPUUtil,omitempty"`
	// FallbackWeights are the static score's weights [cpu, mem, io, net], on the simplex.
	FallbackWeights []float64 `json:"fallbackWeights,omitempty"`
	// FallbackTau is the static score's target utilisation in [0, 1].
	FallbackTau *float64 `json:"fallbackTau,omitempty"`
	// FallbackFragmentation is the static score's fragmentation share in [0, 1]: the score blended with
	// FGD's over the candidates, (1 - share) x minmax(static) + share x minmax(fgd), as the engine's
	// fallback and static-weights' frag blend it; 0: none.
	FallbackFragmentation *float64 `json:"fallbackFragmentation,omitempty"`
	// FallbackTypicalPods is the file of the typical pods the share is measured with, per pool by name: a
	// model card holding them (a shipped blend's model.json) or their own form. Required with a share.
	FallbackTypicalPods string `json:"fallbackTypicalPods,omitempty"`
	// FallbackSpread is the static score's sibling spread in [0, 100] (policy/siblings.py): a candidate's
	// score s becomes (s + spread/(n+1)) / (1+spread), n the pods of the pod's controller on the node (its
	// NodeInfo: bound and assumed pods), after the fragmentation blend, as the engine's fallback spreads;
	// 0: none. Set it to the served model's sibling_spread, so that a dead engine keeps replicas apart.
	FallbackSpread *float64 `json:"fallbackSpread,omitempty"`
	// PoolLabel is the node label naming a node's pool, whose typical pods its fragmentation is measured
	// with (the engine's kubernetes.pool_label).
	PoolLabel string `json:"poolLabel,omitempty"`

	// ScoreHeldActions: while the engine's answer says its action holds (a model whose card declares
	// action_hold_s; ScoreNodes' action_valid_s), score later pods here with that action, over the
	// plugin's own live metrics, without an engine call per pod. false: one call per pod always.
	ScoreHeldActions *bool `json:"scoreHeldActions,omitempty"`
	// Inference is where a per-pod model runs: "engine" (one ScoreNodes call per pod) or "plugin" (the
	// engine's ONNX graph, fetched with GetModel, runs in the scheduler: no engine call on the scheduling
	// cycle). The plugin runs models of action modes full, seed, ceiling and fragmentation that do not hold their
	// action; for the others, in shadow mode, or until the first graph arrives, pods go to the engine.
	Inference string `json:"inference,omitempty"`
	// ModelRefreshSeconds is how often the plugin asks the engine which model it serves (inference: plugin).
	ModelRefreshSeconds *float64 `json:"modelRefreshSeconds,omitempty"`
	// NodeDiskGiB and NodeRDMAPct are a node's disk and RDMA in the observation when its allocatable does not
	// list them (the engine's disk_gib and rdma_pct; inference: plugin).
	NodeDiskGiB *float64 `json:"nodeDiskGiB,omitempty"`
	NodeRDMAPct *float64 `json:"nodeRDMAPct,omitempty"`
}

// TLSArgs are the engine connection's TLS files (PEM).
type TLSArgs struct {
	// CAFile verifies the engine's certificate; empty: the system roots.
	CAFile string `json:"caFile,omitempty"`
	// CertFile and KeyFile: the client certificate for mutual TLS; both or neither.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ServerName overrides the name checked in the engine's certificate.
	ServerName string `json:"serverName,omitempty"`
}
