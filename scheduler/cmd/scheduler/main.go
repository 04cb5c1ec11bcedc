// The td3-scheduler: kube-scheduler with the td3score plugin registered (enable it in a profile of the
// KubeSchedulerConfiguration, see config/td3-scheduler.yaml).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // build info on /metrics
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"td3-scheduler/scheduler/pkg/td3score"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(td3score.Name, td3score.New),
	)
	os.Exit(cli.Run(command))
}
