package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// realisticNode is a Node as a kubelet keeps it in a busy cluster: the
// images it holds, the managed fields of its writers, labels, annotations,
// conditions, capacity and node info.
func realisticNode(i int) *corev1.Node {
	name := fmt.Sprintf("node-%04d.pool-a.example.internal", i)
	n := &corev1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("4f7c1c1e-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: metav1.Unix(1700000000, 0),
			Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256),
			PodCIDRs:   []string{fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256), fmt.Sprintf("fd00:10:%x::/64", i)},
			ProviderID: "aws:///eu-west-1a/i-0" + fmt.Sprintf("%016x", i)},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("172.20.%d.%d", i/256, i%256)},
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00:20::%x", i)}, {Type: corev1.NodeHostName, Address: name}},
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("15800m"), corev1.ResourceMemory: resource.MustParse("62Gi"), corev1.ResourcePods: resource.MustParse("110")},
			NodeInfo: corev1.NodeSystemInfo{MachineID: strings.Repeat("a", 32), SystemUUID: strings.Repeat("b", 36), BootID: strings.Repeat("c", 36),
				KernelVersion: "6.8.0-1021-aws", OSImage: "Ubuntu 24.04.1 LTS", ContainerRuntimeVersion: "containerd://1.7.24",
				KubeletVersion: "v1.32.1", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
	for k := range 15 {
		n.Labels[fmt.Sprintf("example.com/label-%d", k)] = fmt.Sprintf("value-%d-%d", k, i)
	}
	for k := range 6 {
		n.Annotations[fmt.Sprintf("example.com/annotation-%d", k)] = strings.Repeat("x", 60)
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse,
			LastHeartbeatTime: metav1.Unix(1700000100, 0), LastTransitionTime: metav1.Unix(1700000000, 0),
			Reason: "Kubelet" + string(c), Message: "kubelet has no " + string(c)})
	}
	for k := range 50 { // a kubelet reports up to 50 images
		repo := fmt.Sprintf("registry.example.com/team-%d/service-%d", k%7, k)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{SizeBytes: int64(100e6 + k),
			Names: []string{repo + "@sha256:" + strings.Repeat(fmt.Sprintf("%x", k%16), 64), repo + ":v1.2." + fmt.Sprint(k)}})
	}
	var labels, conds []string
	for k := range n.Labels {
		labels = append(labels, `"f:`+k+`":{}`)
	}
	for _, c := range n.Status.Conditions {
		conds = append(conds, `"k:{\"type\":\"`+string(c.Type)+`\"}":{".":{},"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}`)
	}
	fields := `{"f:metadata":{"f:labels":{` + strings.Join(labels, ",") + `}},"f:status":{"f:conditions":{` +
		strings.Join(conds, ",") + `},"f:images":{},"f:nodeInfo":{"f:bootID":{},"f:kernelVersion":{}}}}`
	for _, m := range []string{"kubelet", "kube-controller-manager", "kube-proxy", "cloud-controller-manager"} {
		n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "v1", Time: &metav1.Time{Time: time.Unix(1700000100, 0)}, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}})
	}
	return n
}

// heapPerNode is the heap that holding the Nodes of keep costs, per
// Node: n Nodes are decoded from JSON, as the informer receives them, and
// kept as keep returns them.
func heapPerNode(t *testing.T, n int, keep func(*corev1.Node) any) uint64 {
	t.Helper()
	wire := make([][]byte, n)
	for i := range wire {
		b, err := json.Marshal(realisticNode(i))
		if err != nil {
			t.Fatal(err)
		}
		wire[i] = b
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := make([]any, n)
	for i, b := range wire {
		var node corev1.Node
		if err := json.Unmarshal(b, &node); err != nil {
			t.Fatal(err)
		}
		kept[i] = keep(&node)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	runtime.KeepAlive(wire) // measured apart from the wire form
	return (after.HeapAlloc - before.HeapAlloc) / uint64(n)
}

// TestNodeMemory measures the heap the informer's store holds per Node,
// whole and as slimNode keeps it; the slim one must cost a tenth or less.
func TestNodeMemory(t *testing.T) {
	const n = 1000
	whole := heapPerNode(t, n, func(x *corev1.Node) any { return x })
	slim := heapPerNode(t, n, func(x *corev1.Node) any { s, _ := slimNode(x); return s })
	t.Logf("heap per Node: whole %d bytes, slim %d bytes (%d Nodes)", whole, slim, n)
	if slim*10 > whole {
		t.Errorf("slim Node: %d bytes, want at most a tenth of the whole one's %d", slim, whole)
	}
	// What the agent reads survives.
	x := realisticNode(7)
	s, _ := slimNode(x)
	if got, want := Peer(s.(*corev1.Node)), Peer(x); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("slim Node's peer: got %v, want %v", got, want)
	}
}

// TestNodeHeartbeatNoPass runs the Node informer against a fake API
// server: a status heartbeat (conditions, images) of Node a calls for no
// pass; a change of Node b's addresses, made after it, does, and so do a
// change of a's pod ranges and its deletion.
func TestNodeHeartbeatNoPass(t *testing.T) {
	cs := fake.NewClientset()
	changed := make(chan string, 100)
	factory, inf := nodeInformer(cs, func(name string) { changed <- name })
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); factory.Shutdown() }()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		t.Fatal("informer did not sync")
	}
	nodes := cs.CoreV1().Nodes()
	a, b := realisticNode(1), realisticNode(2)
	for _, n := range []*corev1.Node{a, b} {
		if _, err := nodes.Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	next := func(what string) string {
		t.Helper()
		select {
		case name := <-changed:
			return name
		case <-time.After(time.Minute): // a deadline for the event, not a wait
			t.Fatalf("%s: no pass asked for", what)
			return ""
		}
	}
	seen := map[string]bool{next("Node a added"): true, next("Node b added"): true}
	if !seen[a.Name] || !seen[b.Name] {
		t.Fatalf("adds: got %v, want %s and %s", seen, a.Name, b.Name)
	}

	hb := a.DeepCopy()
	hb.ResourceVersion = "200001"
	for i := range hb.Status.Conditions {
		hb.Status.Conditions[i].LastHeartbeatTime = metav1.Unix(1700000200, 0)
	}
	hb.Status.Images = hb.Status.Images[1:]
	hb.ManagedFields[0].Time = &metav1.Time{Time: time.Unix(1700000200, 0)}
	if _, err := nodes.UpdateStatus(ctx, hb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := b.DeepCopy()
	moved.Status.Addresses[0].Address = "172.20.9.9"
	if _, err := nodes.UpdateStatus(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The informer delivers in order: a's heartbeat came before b's change.
	if got := next("Node b's address changed"); got != b.Name {
		t.Errorf("after a heartbeat of %s: a pass asked for by %s, want none before %s's change", a.Name, got, b.Name)
	}

	ranged := hb.DeepCopy()
	ranged.Spec.PodCIDRs = []string{"10.99.0.0/24"}
	if _, err := nodes.Update(ctx, ranged, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next("Node a's pod ranges changed"); got != a.Name {
		t.Errorf("pod ranges changed: a pass asked for by %s, want %s", got, a.Name)
	}
	if err := nodes.Delete(ctx, a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next("Node a deleted"); got != a.Name {
		t.Errorf("deleted: a pass asked for by %s, want %s", got, a.Name)
	}
}
