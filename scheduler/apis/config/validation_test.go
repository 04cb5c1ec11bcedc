package config

import (
	"math"
	"strings"
	"testing"
)

func defaulted(edit func(*TD3ScoreArgs)) *TD3ScoreArgs {
	args := &TD3ScoreArgs{}
	if edit != nil {
		edit(args)
	}
	SetDefaults(args)
	return args
}

func TestDefaultsAreValid(t *testing.T) {
	args := defaulted(nil)
	if err := Validate(args); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	if *args.FallbackFragmentation != 0 || args.PoolLabel != "td3sched.io/pool" {
		t.Fatalf("defaults: got fallbackFragmentation %g, poolLabel %q", *args.FallbackFragmentation, args.PoolLabel)
	}
	if *args.EngineTimeoutMillis != 15 || *args.SafetyCPUUtil != 0.9 || args.EngineAddress != "127.0.0.1:50051" ||
		!*args.ScoreHeldActions || args.Inference != InferenceEngine || args.MetricsSource != MetricsFromEngine {
		t.Fatalf("defaults: got timeout %d ms, threshold %g, address %q, scoreHeldActions %v, inference %q, "+
			"metricsSource %q", *args.EngineTimeoutMillis, *args.SafetyCPUUtil, args.EngineAddress, *args.ScoreHeldActions,
			args.Inference, args.MetricsSource)
	}
}

func TestSetFieldsAreKept(t *testing.T) {
	args := defaulted(func(a *TD3ScoreArgs) {
		a.EngineTimeoutMillis = ptr(int64(40))
		a.FallbackWeights = []float64{1, 0, 0, 0}
		a.FallbackTau = ptr(0.5)
		a.ScoreHeldActions = ptr(false)
		a.FallbackFragmentation = ptr(0.25)
		a.FallbackTypicalPods = "card.json"
		a.PoolLabel = "example.com/pool"
	})
	if *args.EngineTimeoutMillis != 40 || args.FallbackWeights[0] != 1 || *args.FallbackTau != 0.5 || *args.ScoreHeldActions ||
		*args.FallbackFragmentation != 0.25 || args.FallbackTypicalPods != "card.json" || args.PoolLabel != "example.com/pool" {
		t.Fatalf("SetDefaults overwrote set fields: %+v", args)
	}
}

func TestValidationNamesTheField(t *testing.T) {
	cases := []struct {
		field string
		edit  func(*TD3ScoreArgs)
	}{
		{"args.engineAddress", func(a *TD3ScoreArgs) { a.EngineAddress = "no-port" }},
		{"args.engineTimeoutMillis", func(a *TD3ScoreArgs) { a.EngineTimeoutMillis = ptr(int64(-1)) }},
		{"args.bindingTimeoutMillis", func(a *TD3ScoreArgs) { a.BindingTimeoutMillis = ptr(int64(0)) }},
		{"args.metricsIntervalSeconds", func(a *TD3ScoreArgs) { a.MetricsIntervalSeconds = ptr(math.NaN()) }},
		{"args.metricsMaxAgeSeconds", func(a *TD3ScoreArgs) { a.MetricsMaxAgeSeconds = ptr(math.Inf(1)) }},
		{"args.prometheusURL", func(a *TD3ScoreArgs) { a.PrometheusURL = "127.0.0.1:9090" }},
		{"args.queries[cpu]", func(a *TD3ScoreArgs) { a.Queries = map[string]string{"cpu": "up"} }},
		{"args.safetyCPUUtil", func(a *TD3ScoreArgs) { a.SafetyCPUUtil = ptr(1.5) }},
		{"args.safetyCPUUtil", func(a *TD3ScoreArgs) { a.SafetyCPUUtil = ptr(0.0) }},
		{"args.fallbackWeights", func(a *TD3ScoreArgs) { a.FallbackWeights = []float64{0.5, 0.5, 0.5, 0.5} }},
		{"args.fallbackWeights", func(a *TD3ScoreArgs) { a.FallbackWeights = []float64{1, 0, 0} }},
		{"args.fallbackWeights", func(a *TD3ScoreArgs) { a.FallbackWeights = []float64{1.5, -0.5, 0, 0} }},
		{"args.fallbackTau", func(a *TD3ScoreArgs) { a.FallbackTau = ptr(-0.1) }},
		{"args.tls", func(a *TD3ScoreArgs) { a.TLS = &TLSArgs{CertFile: "client.crt"} }},
		{"args.inference", func(a *TD3ScoreArgs) { a.Inference = "onnx" }},
		{"args.metricsSource", func(a *TD3ScoreArgs) { a.MetricsSource = "kubelet" }},
		{"args.modelRefreshSeconds", func(a *TD3ScoreArgs) { a.ModelRefreshSeconds = ptr(0.0) }},
		{"args.nodeDiskGiB", func(a *TD3ScoreArgs) { a.NodeDiskGiB = ptr(-1.0) }},
		{"args.nodeRDMAPct", func(a *TD3ScoreArgs) { a.NodeRDMAPct = ptr(math.NaN()) }},
		{"args.fallbackFragmentation", func(a *TD3ScoreArgs) { a.FallbackFragmentation = ptr(1.5) }},
		{"args.fallbackFragmentation", func(a *TD3ScoreArgs) { a.FallbackFragmentation = ptr(math.NaN()) }},
		{"args.fallbackTypicalPods", func(a *TD3ScoreArgs) { a.FallbackFragmentation = ptr(0.25) }},
	}
	for _, c := range cases {
		err := Validate(defaulted(c.edit))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: expected an error naming it, got %v", c.field, err)
		}
	}
}
