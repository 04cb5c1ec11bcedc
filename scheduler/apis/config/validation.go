package config

import (
	"fmt"
	"math"
	"net"
	"net/url"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SimplexTolerance is how far the fallback weights' sum may be from 1 (the engine's tolerance).
const SimplexTolerance = 1e-6

// QueryNames are the PromQL queries the node metrics need (the engine's prometheus.queries keys).
var QueryNames = []string{"cpu_cores", "cpu_busy_cores", "mem_total_bytes", "mem_available_bytes", "disk_busy",
	"net_bytes_per_s", "net_speed_bytes", "sample_time_s", "oom_kills_5m"}

// Validate checks defaulted args; every error names its field and the value it got.
func Validate(args *TD3ScoreArgs) error {
	var errs field.ErrorList
	root := field.NewPath("args")
	if _, port, err := net.SplitHostPort(args.EngineAddress); err != nil || port == "" {
		errs = append(errs, field.Invalid(root.Child("engineAddress"), args.EngineAddress, "expected host:port"))
	}
	positive := func(name string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			errs = append(errs, field.Invalid(root.Child(name), v, "expected a positive number"))
		}
	}
	positive("engineTimeoutMillis", float64(*args.EngineTimeoutMillis))
	positive("bindingTimeoutMillis", float64(*args.BindingTimeoutMillis))
	positive("metricsIntervalSeconds", *args.MetricsIntervalSeconds)
	positive("metricsTimeoutSeconds", *args.MetricsTimeoutSeconds)
	positive("metricsMaxAgeSeconds", *args.MetricsMaxAgeSeconds)
	positive("modelRefreshSeconds", *args.ModelRefreshSeconds)
	positive("nodeDiskGiB", *args.NodeDiskGiB)
	positive("nodeRDMAPct", *args.NodeRDMAPct)
	if args.Inference != InferenceEngine && args.Inference != InferencePlugin {
		errs = append(errs, field.NotSupported(root.Child("inference"), args.Inference,
			[]string{InferenceEngine, InferencePlugin}))
	}
	if args.MetricsSource != MetricsFromEngine && args.MetricsSource != MetricsFromPrometheus {
		errs = append(errs, field.NotSupported(root.Child("metricsSource"), args.MetricsSource,
			[]string{MetricsFromEngine, MetricsFromPrometheus}))
	}
	if u, err := url.Parse(args.PrometheusURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, field.Invalid(root.Child("prometheusURL"), args.PrometheusURL, "expected an http(s) URL"))
	}
	for name := range args.Queries {
		if !contains(QueryNames, name) {
			errs = append(errs, field.NotSupported(root.Child("queries").Key(name), name, QueryNames))
		}
	}
	if v := *args.SafetyCPUUtil; !(v > 0 && v <= 1) {
		errs = append(errs, field.Invalid(root.Child("safetyCPUUtil"), v, "expected a share in (0, 1]"))
	}
	errs = append(errs, validateWeights(root, args.FallbackWeights, *args.FallbackTau)...)
	if v := *args.FallbackFragmentation; !(v >= 0 && v <= 1) {
		errs = append(errs, field.Invalid(root.Child("fallbackFragmentation"), v, "expected a share in [0, 1]"))
	} else if v > 0 && args.FallbackTypicalPods == "" {
		errs = append(errs, field.Required(root.Child("fallbackTypicalPods"),
			fmt.Sprintf("fallbackFragmentation %g needs the typical pods it is measured with (a model card or "+
				"typical pods file)", v)))
	}
	if v := *args.FallbackSpread; !(v >= 0 && v <= MaxFallbackSpread) {
		errs = append(errs, field.Invalid(root.Child("fallbackSpread"), v,
			fmt.Sprintf("expected a sibling spread in [0, %g] (0: none)", MaxFallbackSpread)))
	}
	if t := args.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, field.Invalid(root.Child("tls"), fmt.Sprintf("certFile=%q keyFile=%q", t.CertFile, t.KeyFile),
			"expected both certFile and keyFile (mutual TLS) or neither"))
	}
	return errs.ToAggregate()
}

func validateWeights(root *field.Path, w []float64, tau float64) field.ErrorList {
	var errs field.ErrorList
	sum, ok := 0.0, len(w) == 4
	for _, x := range w {
		ok = ok && x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x)
		sum += x
	}
	if !ok || math.Abs(sum-1) > SimplexTolerance {
		errs = append(errs, field.Invalid(root.Child("fallbackWeights"), w,
			"expected 4 non-negative numbers [w_cpu, w_mem, w_io, w_net] summing to 1"))
	}
	if !(tau >= 0 && tau <= 1) {
		errs = append(errs, field.Invalid(root.Child("fallbackTau"), tau, "expected a target utilisation in [0, 1]"))
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
