// Package kube is what the harness asks of the cluster's API server, over
// client-go: that it is ready, that every node has registered.
package kube

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// restConfig is the admin's kubeconfig as client-go's config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// Client is a clientset of the admin's kubeconfig.
func Client(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second // one request; the waits have their own deadline
	return kubernetes.NewForConfig(cfg)
}

// WaitReady waits until the API server answers /readyz with ok, or alive
// says the process serving it is gone, or ctx ends.
func WaitReady(ctx context.Context, c *kubernetes.Clientset, alive func() error) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 300*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, last = c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if last == nil {
			return true, nil
		}
		return false, alive()
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last answer: %v)", err, last)
	}
	return err
}

// WaitNodes waits until n Nodes have their pod CIDRs and the default
// ServiceAccount exists (pods need it), or ctx ends; it says how many had.
func WaitNodes(ctx context.Context, c *kubernetes.Clientset, n int) error {
	got := 0
	err := wait.PollUntilContextCancel(ctx, 300*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil // the API server is busy: ask again
		}
		got = 0
		for _, nd := range nodes.Items {
			if len(nd.Spec.PodCIDRs) > 0 {
				got++
			}
		}
		if got < n {
			return false, nil
		}
		_, err = c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d nodes registered with pod CIDRs: %w", got, n, err)
	}
	return nil
}
