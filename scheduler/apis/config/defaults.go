package config

// Defaults of TD3ScoreArgs, in one place.
var (
	DefaultEngineAddress        = "127.0.0.1:50051"
	DefaultEngineTimeoutMillis  = int64(15)
	DefaultBindingTimeoutMillis = int64(200)
	// DefaultMetricsSource: the engine's copy, Prometheus when the engine cannot give it.
	DefaultMetricsSource          = MetricsFromEngine
	DefaultPrometheusURL          = "http://127.0.0.1:9090"
	DefaultMetricsIntervalSeconds = 15.0
	DefaultMetricsTimeoutSeconds  = 5.0
	DefaultMetricsMaxAgeSeconds   = 60.0
	DefaultSafetyCPUUtil          = 0.9
	// DefaultFallbackWeights and DefaultFallbackTau: static-weights' defaults (equal weights, tau 0).
	DefaultFallbackWeights = []float64{0.25, 0.25, 0.25, 0.25}
	DefaultFallbackTau     = 0.0
	// DefaultFallbackFragmentation: no fragmentation term.
	DefaultFallbackFragmentation = 0.0
	// DefaultFallbackSpread: no sibling spread.
	DefaultFallbackSpread = 0.0
	// MaxFallbackSpread is the largest sibling spread (policy/siblings.py MAX_SPREAD).
	MaxFallbackSpread = 100.0
	// DefaultPoolLabel: the engine's default pool label.
	DefaultPoolLabel = "td3sched.io/pool"
	// DefaultScoreHeldActions: a held action is scored in the scheduler, one engine call per hold.
	DefaultScoreHeldActions = true
	// DefaultInference: the engine answers each pod (its decision log sees every decision).
	DefaultInference           = InferenceEngine
	DefaultModelRefreshSeconds = 10.0
	// DefaultNodeDiskGiB and DefaultNodeRDMAPct: the engine's defaults (engine config disk_gib, rdma_pct).
	DefaultNodeDiskGiB = 100.0
	DefaultNodeRDMAPct = 100.0
)

// Where a per-pod model runs (TD3ScoreArgs.Inference).
const (
	InferenceEngine = "engine"
	InferencePlugin = "plugin"
)

// Where the live node metrics come from (TD3ScoreArgs.MetricsSource).
const (
	MetricsFromEngine     = "engine"
	MetricsFromPrometheus = "prometheus"
)

// SetDefaults fills every unset field of args.
func SetDefaults(args *TD3ScoreArgs) {
	if args.EngineAddress == "" {
		args.EngineAddress = DefaultEngineAddress
	}
	if args.EngineTimeoutMillis == nil {
		args.EngineTimeoutMillis = ptr(DefaultEngineTimeoutMillis)
	}
	if args.BindingTimeoutMillis == nil {
		args.BindingTimeoutMillis = ptr(DefaultBindingTimeoutMillis)
	}
	if args.MetricsSource == "" {
		args.MetricsSource = DefaultMetricsSource
	}
	if args.PrometheusURL == "" {
		args.PrometheusURL = DefaultPrometheusURL
	}
	if args.MetricsIntervalSeconds == nil {
		args.MetricsIntervalSeconds = ptr(DefaultMetricsIntervalSeconds)
	}
	if args.MetricsTimeoutSeconds == nil {
		args.MetricsTimeoutSeconds = ptr(DefaultMetricsTimeoutSeconds)
	}
	if args.MetricsMaxAgeSeconds == nil {
		args.MetricsMaxAgeSeconds = ptr(DefaultMetricsMaxAgeSeconds)
	}
	if args.SafetyCPUUtil == nil {
		args.SafetyCPUUtil = ptr(DefaultSafetyCPUUtil)
	}
	if args.FallbackWeights == nil {
		args.FallbackWeights = append([]float64(nil), DefaultFallbackWeights...)
	}
	if args.FallbackTau == nil {
		args.FallbackTau = ptr(DefaultFallbackTau)
	}
	if args.FallbackFragmentation == nil {
		args.FallbackFragmentation = ptr(DefaultFallbackFragmentation)
	}
	if args.FallbackSpread == nil {
		args.FallbackSpread = ptr(DefaultFallbackSpread)
	}
	if args.PoolLabel == "" {
		args.PoolLabel = DefaultPoolLabel
	}
	if args.ScoreHeldActions == nil {
		args.ScoreHeldActions = ptr(DefaultScoreHeldActions)
	}
	if args.Inference == "" {
		args.Inference = DefaultInference
	}
	if args.ModelRefreshSeconds == nil {
		args.ModelRefreshSeconds = ptr(DefaultModelRefreshSeconds)
	}
	if args.NodeDiskGiB == nil {
		args.NodeDiskGiB = ptr(DefaultNodeDiskGiB)
	}
	if args.NodeRDMAPct == nil {
		args.NodeRDMAPct = ptr(DefaultNodeRDMAPct)
	}
}

func ptr[T any](v T) *T { return &v }
