package td3score

import (
	"fmt"
	"math"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	enginev1 "td3-scheduler/scheduler/pkg/engine/v1"
)

const (
	gpuResource v1.ResourceName = "nvidia.com/gpu"
	// rdmaResource is RDMA in percent of one device (Koordinator's device-share convention), the
	// simulator's rdma_pct (kubernetes_objects.RDMA_RESOURCE).
	rdmaResource v1.ResourceName = "koordinator.sh/rdma"
)

// EnginePod is what the engine needs of a v1.Pod, read as src/td3sched/engine/kubernetes_objects.py
// reads it (the shared test vectors hold the two equal): each request is what NodeResourcesFit counts
// (the containers' sum or the largest init container's, plus spec.overhead; a missing request is its
// limit); a limit is none (0) when a container has none; QoS is status.qosClass, else derived; the owner
// is the pod's controller (Owner).
func EnginePod(pod *v1.Pod) (*enginev1.Pod, error) {
	name := pod.Name
	if name == "" {
		name = pod.GenerateName
	}
	if len(pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("pod %s/%s: spec.containers: empty", pod.Namespace, name)
	}
	read := func(c v1.Container) containerResources {
		r := containerResources{map[v1.ResourceName]float64{}, map[v1.ResourceName]float64{}}
		for k, q := range c.Resources.Requests {
			r.requests[k] = q.AsApproximateFloat64()
		}
		for k, q := range c.Resources.Limits {
			r.limits[k] = q.AsApproximateFloat64()
			if _, ok := r.requests[k]; !ok {
				r.requests[k] = r.limits[k]
			}
		}
		return r
	}
	containers := make([]containerResources, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		containers = append(containers, read(c))
	}
	inits := make([]containerResources, 0, len(pod.Spec.InitContainers))
	for _, c := range pod.Spec.InitContainers {
		inits = append(inits, read(c))
	}
	request := func(key v1.ResourceName) float64 {
		sum := 0.0
		for _, c := range containers {
			sum += c.requests[key]
		}
		for _, c := range inits {
			sum = math.Max(sum, c.requests[key])
		}
		if q, ok := pod.Spec.Overhead[key]; ok {
			sum += q.AsApproximateFloat64()
		}
		return sum
	}
	limit := func(key v1.ResourceName) float64 { // 0: no limit
		sum := 0.0
		for _, c := range containers {
			v, ok := c.limits[key]
			if !ok {
				return 0
			}
			sum += v
		}
		for _, c := range inits {
			sum = math.Max(sum, c.limits[key])
		}
		return sum
	}
	gpus := request(gpuResource)
	if gpus != math.Trunc(gpus) {
		return nil, fmt.Errorf("pod %s/%s: %s request %g: expected whole GPUs", pod.Namespace, name, gpuResource, gpus)
	}
	out := &enginev1.Pod{
		Namespace:     pod.Namespace,
		Name:          name,
		CpuMilli:      request(v1.ResourceCPU) * 1000,
		MemMib:        request(v1.ResourceMemory) / (1 << 20),
		DiskGib:       request(v1.ResourceEphemeralStorage) / GiB,
		RdmaPct:       request(rdmaResource),
		GpuCount:      uint32(gpus),
		CpuLimitMilli: limit(v1.ResourceCPU) * 1000,
		MemLimitMib:   limit(v1.ResourceMemory) / (1 << 20),
		Qos:           qos(pod, containers),
		Owner:         Owner(pod),
	}
	if gpus > 0 {
		out.GpuMilli = 1000
	}
	return out, nil
}

// Owner is the pod's controller as the engine names it (kubernetes_objects.controller_of): the
// namespace, kind and name of the owner reference marked controller, "namespace/Kind/name" (an empty
// namespace is "default"); "" for a pod no controller made. Its other pods are the pod's siblings.
func Owner(pod *v1.Pod) string {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return ""
	}
	namespace := pod.Namespace
	if namespace == "" {
		namespace = "default"
	}
	return namespace + "/" + ref.Kind + "/" + ref.Name
}

// containerResources are one container's requests (defaulted to its limits) and limits, in base units.
type containerResources struct{ requests, limits map[v1.ResourceName]float64 }

func qos(pod *v1.Pod, containers []containerResources) enginev1.QosClass {
	switch pod.Status.QOSClass {
	case v1.PodQOSGuaranteed:
		return enginev1.QosClass_QOS_CLASS_GUARANTEED
	case v1.PodQOSBurstable:
		return enginev1.QosClass_QOS_CLASS_BURSTABLE
	case v1.PodQOSBestEffort:
		return enginev1.QosClass_QOS_CLASS_BEST_EFFORT
	}
	bestEffort, guaranteed := true, true
	for _, r := range containers {
		if len(r.requests) > 0 || len(r.limits) > 0 {
			bestEffort = false
		}
		for _, k := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			l, ok := r.limits[k]
			if !ok || r.requests[k] != l {
				guaranteed = false
			}
		}
	}
	switch {
	case bestEffort:
		return enginev1.QosClass_QOS_CLASS_BEST_EFFORT
	case guaranteed:
		return enginev1.QosClass_QOS_CLASS_GUARANTEED
	}
	return enginev1.QosClass_QOS_CLASS_BURSTABLE
}
