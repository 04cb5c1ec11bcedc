package td3score

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Fallback reasons: why Score used the static score instead of the engine's answer (a fixed set).
const (
	ReasonTimeout     = "timeout"      // ScoreNodes did not answer within engineTimeoutMillis
	ReasonUnavailable = "unavailable"  // the engine is unreachable or not ready (gRPC UNAVAILABLE)
	ReasonError       = "error"        // any other failed call (gRPC status other than the above)
	ReasonNaN         = "nan"          // the answer's action holds a NaN or an infinity
	ReasonInvalid     = "invalid"      // a score outside 0-100, a duplicate or unknown node: garbage
	ReasonMissingNode = "missing_node" // a candidate is not in the answer
	ReasonAdvisory    = "advisory"     // the engine runs in shadow mode: its answer is not to be acted on
	ReasonBadPod      = "bad_pod"      // the pod cannot be described to the engine (fractional GPUs)
	// In-process inference (inference: plugin) only:
	ReasonNoFreshMetrics = "no_fresh_metrics" // no candidate has fresh metrics to observe (the engine's reason)
	ReasonModelError     = "model_error"      // the model failed to run or gave an action of the wrong width
)

// Reasons lists every fallback reason, for tests and dashboards.
var Reasons = []string{ReasonTimeout, ReasonUnavailable, ReasonError, ReasonNaN, ReasonInvalid, ReasonMissingNode,
	ReasonAdvisory, ReasonBadPod, ReasonNoFreshMetrics, ReasonModelError}

// The plugin's metrics, on kube-scheduler's /metrics (component-base's legacy registry).
var (
	decisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "td3score", Name: "decisions_total", StabilityLevel: metrics.ALPHA,
		Help: "Pods scored, by the source of the scores: engine (its answer), held (the engine's held action, scored in the plugin), plugin (the engine's model run in the plugin) or static (the fallback).",
	}, []string{"source"})
	fallbacks = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "td3score", Name: "fallbacks_total", StabilityLevel: metrics.ALPHA,
		Help: "Pods scored with the static score instead of the engine's answer, by reason.",
	}, []string{"reason"})
	engineLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: "td3score", Name: "engine_request_duration_seconds", StabilityLevel: metrics.ALPHA,
		Help:    "Duration of the engine's ScoreNodes and ReportBinding calls as the plugin sees them.",
		Buckets: []float64{0.0005, 0.001, 0.002, 0.004, 0.008, 0.015, 0.03, 0.06, 0.125, 0.25, 0.5},
	}, []string{"call", "result"})
	safetyFiltered = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem: "td3score", Name: "safety_filtered_nodes_total", StabilityLevel: metrics.ALPHA,
		Help: "Nodes Filter rejected because their observed CPU was above the safety threshold.",
	})
	metricsRefreshes = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "td3score", Name: "node_metrics_refreshes_total", StabilityLevel: metrics.ALPHA,
		Help: "Reads of the live node metrics, by reader (engine, prometheus: tried in that order) and result (ok, error).",
	}, []string{"reader", "result"})
	metricsAge = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "td3score", Name: "node_metrics_age_seconds", StabilityLevel: metrics.ALPHA,
		Help: "Age of the node metrics snapshot Filter and the static score read, at its last refresh.",
	})
	modelRefreshes = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "td3score", Name: "model_refreshes_total", StabilityLevel: metrics.ALPHA,
		Help: "Refreshes of the engine's model for in-process inference, by result: loaded (a new graph), unchanged, engine (none to run here: the engine answers), refused (a graph the plugin cannot run) or error.",
	}, []string{"result"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(decisions, fallbacks, engineLatency, safetyFiltered, metricsRefreshes, metricsAge,
			modelRefreshes)
	})
}
