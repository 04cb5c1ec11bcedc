package td3score

import (
	"math"
	"net"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"td3-scheduler/scheduler/apis/config"
)

func TestSpreadSiblingsIsThePythonRule(t *testing.T) {
	v := loadVectors(t)
	if len(v.Siblings) < 20 {
		t.Fatalf("testdata/vectors.json: %d siblings cases", len(v.Siblings))
	}
	for i, c := range v.Siblings {
		if got := SpreadSiblings(c.Score, c.Siblings, c.Spread); !near(got, c.Value) {
			t.Errorf("siblings[%d] %+v: Go %g", i, c, got)
		}
	}
}

// replica is a pod of the given controller (kind, name; none when kind is "") in namespace ns.
func replica(name, ns, kind, owner string, controller bool) *v1.Pod {
	meta := metav1.ObjectMeta{Name: name, Namespace: ns, UID: k8stypes.UID("uid-" + name)}
	if kind != "" {
		meta.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner,
			UID: k8stypes.UID("uid-" + owner), Controller: &controller}}
	}
	return &v1.Pod{ObjectMeta: meta, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
}

func TestSiblingsOnCountsTheNodesPodsOfThePodsController(t *testing.T) {
	info := framework.NewNodeInfo()
	info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	for _, p := range []*v1.Pod{
		replica("web-a", "shop", "ReplicaSet", "web-7d9", true),
		replica("web-b", "shop", "ReplicaSet", "web-7d9", true),
		replica("web-other-ns", "lab", "ReplicaSet", "web-7d9", true), // same name, another namespace
		replica("web-owned", "shop", "ReplicaSet", "web-7d9", false),  // owned, not controlled
		replica("db-0", "shop", "StatefulSet", "db", true),
		replica("lone", "shop", "", "", false),
	} {
		info.AddPod(p)
	}
	pod := replica("web-c", "shop", "ReplicaSet", "web-7d9", true)
	if got := Owner(pod); got != "shop/ReplicaSet/web-7d9" {
		t.Fatalf("Owner: %q", got)
	}
	for owner, want := range map[string]int{Owner(pod): 2, "shop/StatefulSet/db": 1, "lab/ReplicaSet/web-7d9": 1,
		"": 0, "shop/Job/x": 0} {
		if got := SiblingsOn(info, owner); got != want {
			t.Errorf("SiblingsOn(%q) = %d, want %d", owner, got, want)
		}
	}
	if got := Owner(replica("x", "", "Job", "j", true)); got != "default/Job/j" {
		t.Errorf("Owner of a pod without a namespace: %q", got)
	}
}

// TestInferenceLowersTheNodesRunningThePodsSiblings runs the vectors' decisions with the model's card
// fixing a sibling spread of 3 and some of the pod's siblings on each candidate: every fresh candidate
// scores the engine's score lowered by SpreadSiblings (the engine's decision with the spread: the
// vectors' scores, then policy/siblings.py spread_siblings), every other as before.
func TestInferenceLowersTheNodesRunningThePodsSiblings(t *testing.T) {
	v := loadInferenceVectors(t)
	pl := newTestPlugin(t, "127.0.0.1:1", nil)
	const spread = 3.0
	models := map[bool]*servedModel{}
	for _, failClosed := range []bool{false, true} {
		m := servedTestModel(t, failClosed)
		models[failClosed] = &servedModel{actor: m.actor, version: m.version, mode: m.mode, failClosed: failClosed,
			spread: spread}
	}
	lowered := 0
	for i, d := range v.Decisions {
		if d.FallbackReason != "" {
			continue
		}
		snap, now, nodes := d.publish(pl)
		siblings := make([]int, len(d.Candidates))
		for j, name := range d.Candidates {
			info := nodes[j].(*framework.NodeInfo)
			siblings[j] = j % 3
			for k := 0; k < siblings[j]; k++ {
				info.AddPod(replica(name+"-web-"+string(rune('a'+k)), "shop", "ReplicaSet", "web-7d9", true))
			}
			info.AddPod(replica(name+"-db", "shop", "StatefulSet", "db", true)) // no sibling
		}
		p := d.Pod.engine()
		p.Namespace, p.Owner = "shop", "shop/ReplicaSet/web-7d9"
		scores, reason, err := pl.inferScores(models[d.FailClosed], p, nodes)
		if reason != "" {
			t.Fatalf("decision %d: fell back (%s: %v)", i, reason, err)
		}
		for j, name := range d.Candidates {
			want := d.Scores100[j]
			if _, fresh, _, _ := pl.nodeState(snap, name, now); fresh {
				exact := SpreadSiblings(d.Scores[j], float64(siblings[j]), spread)
				want = To100(exact)
				if siblings[j] > 0 {
					lowered++
				}
				halfway := math.Abs(math.Mod(100*exact, 1)-0.5) < 1e-3
				if got := scores[name]; got != want && !(halfway && math.Abs(float64(got-want)) == 1) {
					t.Fatalf("decision %d: node %s (%d siblings) scored %d, want %d (%.6f)", i, name, siblings[j], got,
						want, 100*exact)
				}
			} else if scores[name] != want {
				t.Fatalf("decision %d: stale node %s scored %d, want %d", i, name, scores[name], want)
			}
		}
	}
	if lowered < 20 {
		t.Fatalf("only %d fresh candidates had siblings", lowered)
	}
}

func TestADeadEnginesStaticScoreKeepsTheReplicasApartWithAFallbackSpread(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := lis.Addr().String()
	_ = lis.Close() // nothing listens there: every pod falls back
	for _, spread := range []float64{0, 3} {
		pl := newTestPlugin(t, address, func(a *config.TD3ScoreArgs) {
			a.EngineTimeoutMillis = ptrTo(int64(500))
			a.FallbackWeights, a.FallbackTau, a.FallbackSpread = []float64{1, 0, 0, 0}, ptrTo(1.0), ptrTo(spread)
		})
		snap, nodes := testNodes([]float64{0.3, 0.6, 0.5}, 0)
		pl.metrics.Publish(snap)
		nodes[1].(*framework.NodeInfo).AddPod(replica("web-a", "shop", "ReplicaSet", "web-7d9", true)) // the busiest node runs a sibling
		pod := replica("web-b", "shop", "ReplicaSet", "web-7d9", true)
		got, _ := cycle(t, pl, pod, nodes)
		p, _ := EnginePod(pod)
		for _, n := range nodes {
			name := n.Node().Name
			m := snap.Nodes[name]
			u := Utilisation(p.CpuMilli, p.MemMib, m, 0, 0)
			want := To100(SpreadSiblings(WeightedCloseness(u, [4]float64{1, 0, 0, 0}, 1), float64(SiblingsOn(n, p.Owner)), spread))
			if got[name] != want {
				t.Errorf("spread %g, node %s (%d siblings): %d, want %d", spread, name, SiblingsOn(n, p.Owner), got[name], want)
			}
			if spread == 0 && got[name] != StaticScore(p.CpuMilli, p.MemMib, m, true, 0, 0, pl.weights, 1) {
				t.Errorf("spread 0, node %s: %d is not the static score", name, got[name])
			}
		}
		best := map[bool]string{false: "n1", true: "n2"}[spread > 0] // packing picks the busiest node without a sibling
		for name, s := range got {
			if name != best && s >= got[best] {
				t.Errorf("spread %g: %s scores %d, not below %s's %d (%v)", spread, name, s, best, got[best], got)
			}
		}
	}
	bad := config.TD3ScoreArgs{FallbackSpread: ptrTo(101.0)}
	config.SetDefaults(&bad)
	if err := config.Validate(&bad); err == nil || !strings.Contains(err.Error(), "fallbackSpread: Invalid value: 101") {
		t.Fatalf("a spread of 101: %v", err)
	}
}
