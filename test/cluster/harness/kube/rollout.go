package kube

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// A Rollout is what WaitRolledOut waits for: "daemonset/NAMESPACE/NAME",
// "deployment/NAMESPACE/NAME" or "nodes" (every Node Ready).
type Rollout struct{ Kind, Namespace, Name string }

func (r Rollout) String() string {
	if r.Kind == "nodes" {
		return "nodes"
	}
	return r.Kind + "/" + r.Namespace + "/" + r.Name
}

// done says whether the object has rolled out, and if not, what it waits for.
func (r Rollout) done(ctx context.Context, c *kubernetes.Clientset) (string, error) {
	get := metav1.GetOptions{}
	switch r.Kind {
	case "daemonset":
		ds, err := c.AppsV1().DaemonSets(r.Namespace).Get(ctx, r.Name, get)
		if err != nil {
			return "", err
		}
		return daemonSetWaits(ds), nil
	case "deployment":
		d, err := c.AppsV1().Deployments(r.Namespace).Get(ctx, r.Name, get)
		if err != nil {
			return "", err
		}
		return deploymentWaits(d), nil
	case "nodes":
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		for _, n := range nodes.Items {
			if !NodeReady(&n) {
				return "node " + n.Name + " not Ready", nil
			}
		}
		return "", nil
	}
	return "", fmt.Errorf("%s: want daemonset/NS/NAME, deployment/NS/NAME or nodes", r)
}

// The conditions kubectl rollout status checks.
func daemonSetWaits(ds *appsv1.DaemonSet) string {
	s := ds.Status
	switch {
	case s.ObservedGeneration < ds.Generation:
		return "its new spec not yet observed"
	case s.UpdatedNumberScheduled < s.DesiredNumberScheduled:
		return fmt.Sprintf("%d of %d pods updated", s.UpdatedNumberScheduled, s.DesiredNumberScheduled)
	case s.NumberAvailable < s.DesiredNumberScheduled:
		return fmt.Sprintf("%d of %d updated pods available", s.NumberAvailable, s.DesiredNumberScheduled)
	}
	return ""
}

func deploymentWaits(d *appsv1.Deployment) string {
	s, want := d.Status, int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	switch {
	case s.ObservedGeneration < d.Generation:
		return "its new spec not yet observed"
	case s.UpdatedReplicas < want:
		return fmt.Sprintf("%d of %d replicas updated", s.UpdatedReplicas, want)
	case s.Replicas > s.UpdatedReplicas:
		return fmt.Sprintf("%d old replicas pending termination", s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < s.UpdatedReplicas:
		return fmt.Sprintf("%d of %d updated replicas available", s.AvailableReplicas, s.UpdatedReplicas)
	}
	return ""
}

// NodeReady: whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodReady: whether the pod is not being deleted and its Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitRolledOut waits until each rollout is done, in order, or ctx ends.
func WaitRolledOut(ctx context.Context, c *kubernetes.Clientset, rollouts ...Rollout) error {
	for _, r := range rollouts {
		var waits string
		err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			w, err := r.done(ctx, c)
			if err != nil {
				waits = err.Error()
				return false, nil // not there yet, or the API server busy
			}
			waits = w
			return w == "", nil
		})
		if err != nil {
			return fmt.Errorf("%s not rolled out (%s): %w", r, waits, err)
		}
	}
	return nil
}
